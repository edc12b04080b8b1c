"""The one way a config setting's range, and the one way its choices, are declared and enforced.

`bounded` declares a numeric field's range next to its type and default (as field metadata). `Bounds.refusal`
is the one check of a value against it: the YAML loader runs it on each field before a section is built
(naming the dotted path), and every section's `__post_init__` runs it through `check_bounds`, so a section
built directly or by `dataclasses.replace` (the NodeSLO mapping) is held to the same range with the same
words. Checks that tie two settings together stay in the section's `__post_init__`.

A choice is declared by its type alone: `Literal["a", "b"]` (a `bool` is the choice true | false; `| None`
adds null). `choices_of` reads the allowed values from the annotation and `choice_refusal` is the one check
of a value against them: the loader runs it on each such field, and `check_choices` in a section's
`__post_init__`, with the same words. A field that takes fixed words or a free-form value
(`cgroups.systemd_bus`: auto, off or a socket path) is not a choice and keeps its own check.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

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


def choices_of(tp: object) -> tuple[object, ...] | None:
    """The values a field of type `tp` may take when it is a choice (`Literal[...]`, `bool`, either `| None`,
    or a union of them); None when it is not one."""
    if tp is bool:
        return (True, False)
    if tp is type(None):
        return (None,)
    origin = get_origin(tp)
    if origin is Literal:
        return get_args(tp)
    if origin is Union or origin is types.UnionType:
        members = [choices_of(arg) for arg in get_args(tp)]
        if all(m is not None for m in members):
            return tuple(v for m in members for v in m or ())
    return None


def _show(value: object) -> str:
    """A choice as YAML spells it: true, false, null; anything else by its (cut) repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return short(value)


def choice_refusal(allowed: tuple[object, ...], value: object) -> str | None:
    """Why `value` is not one of `allowed` (None when it is). Compared with its type: 1 is not true."""
    if any(type(value) is type(a) and value == a for a in allowed):
        return None
    if allowed == (True, False):
        return f"must be true or false, got {short(value)}"
    return f"must be one of {', '.join(_show(a) for a in allowed)}, got {short(value)}"


_CHOICE_FIELDS: dict[type, dict[str, tuple[object, ...]]] = {}


def choice_fields(cls: type) -> dict[str, tuple[object, ...]]:
    """The allowed values of each choice field of dataclass `cls`, read from its annotations (once)."""
    known = _CHOICE_FIELDS.get(cls)
    if known is None:
        hints = get_type_hints(cls)
        fields = (f.name for f in dataclasses.fields(cls))
        known = {name: allowed for name in fields if (allowed := choices_of(hints[name])) is not None}
        _CHOICE_FIELDS[cls] = known
    return known


def check_choices(section: Any, where: str, error: type[ValueError] = ValueError) -> None:
    """Refuse the first choice field of dataclass instance `section` whose value its annotation does not
    allow: `error` `<where>.<field>: must be one of 'a', 'b', got <value>` (`where` "" names the field)."""
    prefix = f"{where}." if where else ""
    for name, allowed in choice_fields(type(section)).items():
        why = choice_refusal(allowed, getattr(section, name))
        if why is not None:
            raise error(f"{prefix}{name}: {why}")
