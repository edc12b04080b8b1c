"""The one way a config setting's range is declared and enforced.

`bounded` declares a numeric field's range next to its type and default (as field metadata). `Bounds.refusal`
is the one check of a value against it: the YAML loader runs it on each field before a section is built
(naming the dotted path), and every section's `__post_init__` runs it through `check_bounds`, so a section
built directly or by `dataclasses.replace` (the NodeSLO mapping) is held to the same range with the same
words. Checks that tie two settings together stay in the section's `__post_init__`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

BOUNDS = "bounds"  # the field-metadata key


def short(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: an error message never renders a whole (hostile) value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """A numeric setting's range: both ends included, the low one excluded when `low_open`."""

    low: int | float
    high: int | float
    low_open: bool = False

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{_fmt(self.low)}, {_fmt(self.high)}]"

    def holds(self, value: int | float) -> bool:
        """Whether `value` lies in the range (NaN never does)."""
        above = self.low < value if self.low_open else self.low <= value
        return above and value <= self.high

    def refusal(self, value: object) -> str | None:
        """Why `value` cannot be this setting (None when it can): not a number, or outside the range."""
        # bool is an int subclass; `threshold_percent: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number in {self}, got {short(value)}"
        if not self.holds(value):
            return f"must be in {self}, got {short(value)}"
        return None


def _fmt(v: int | float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def bounded(default: Any, low: int | float, high: int | float, *, low_open: bool = False) -> Any:
    """A dataclass field with `default` whose value must lie in [low, high] ((low, high] when `low_open`);
    None passes where the field is optional."""
    return dataclasses.field(default=default, metadata={BOUNDS: Bounds(low, high, low_open)})


def bounds_of(cls: type) -> dict[str, Bounds]:
    """The declared range of each bounded field of dataclass `cls`."""
    return {f.name: f.metadata[BOUNDS] for f in dataclasses.fields(cls) if BOUNDS in f.metadata}


def check_bounds(section: Any, where: str, error: type[ValueError] = ValueError) -> None:
    """Refuse the first bounded field of dataclass instance `section` outside its declared range: `error`
    `<where>.<field>: must be in [low, high], got <value>` (`where` "" names the field alone)."""
    prefix = f"{where}." if where else ""
    for f in dataclasses.fields(section):
        bounds = f.metadata.get(BOUNDS)
        value = getattr(section, f.name)
        if bounds is not None and value is not None and (why := bounds.refusal(value)) is not None:
            raise error(f"{prefix}{f.name}: {why}")


def integer(field: str, value: object) -> int:
    """Return `value` if it is an int (not a bool); its range is declared with `bounded`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be an integer, got {short(value)}")
    return value


def flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false, got {value!r}")
    return value


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return value
