"""Checks shared by the policy configs: each raises ValueError naming the offending field.

`bounded` declares a numeric field's sane range next to its default (as field metadata); the agent's
config loader refuses a YAML or NodeSLO value outside it before the config object is built.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

BOUNDS = "bounds"  # the field-metadata key


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """A numeric setting's documented range, both ends included."""

    low: int | float
    high: int | float

    def __str__(self) -> str:
        return f"[{_fmt(self.low)}, {_fmt(self.high)}]"


def _fmt(v: int | float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def bounded(default: Any, low: int | float, high: int | float) -> Any:
    """A dataclass field with `default` whose value must lie in [low, high]."""
    return dataclasses.field(default=default, metadata={BOUNDS: Bounds(low, high)})


def bounds_of(cls: type) -> dict[str, Bounds]:
    """The declared range of each bounded field of dataclass `cls`."""
    return {f.name: f.metadata[BOUNDS] for f in dataclasses.fields(cls) if BOUNDS in f.metadata}


def number(
    field: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """Return `value` as a float if it is a finite real number within [low, high] (or (low, high])."""
    # bool is an int subclass; `threshold_percent: true` in a YAML file is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{field} must be finite, got {value!r}")
    if low is not None and (v <= low if low_open else v < low):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise ValueError(f"{field} must be {bound}, got {value!r}")
    if high is not None and v > high:
        raise ValueError(f"{field} must be <= {high:g}, got {value!r}")
    return v


def integer(field: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """Return `value` if it is an int (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{field} must be >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{field} must be <= {high}, got {value!r}")
    return value


def flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false, got {value!r}")
    return value


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return value
