"""Checks shared by the policy configs: each raises ValueError naming the offending field."""

from __future__ import annotations

import math


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
