"""Build frozen config dataclasses from plain YAML data, naming the field whenever something is wrong.

Every config dataclass in the agent is loaded through `from_mapping`: unknown keys, wrong types, numbers
outside a field's declared range (`qos.validation.bounded`, checked here by the same `Bounds.refusal` the
section's own `__post_init__` runs), values outside a choice field's `Literal` (or `bool`) annotation
(`qos.validation.choice_refusal`, the check `check_choices` runs in `__post_init__`) and values its
`__post_init__` rejects all raise `ConfigError` with the dotted path of the field.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from qos.quantity import QuantityError, to_int
from qos.validation import bounds_of, choice_refusal, choices_of, short

T = TypeVar("T")

MAX_CONFIG_BYTES = 1 << 20  # a real config is a few KiB
MAX_DEPTH = 32  # the deepest real config is 5 levels
MAX_NODES = 100_000
INT64_MAX = (1 << 63) - 1
_SUB_BYTE = {"u": "millionths", "n": "billionths"}


class ConfigError(ValueError):
    """A config value is wrong; the message starts with the dotted path of the field."""


def _key(name: str) -> str:
    """A field name as an error message shows it: plain names as they are, anything else quoted."""
    return name if name.isidentifier() else short(name)


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and nesting deeper than MAX_DEPTH while composing, before any
    value is built. Aliases are refused outright rather than counted: no agent config needs them, and a
    count would still let a few aliases expand a large anchor many times over."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise ConfigError(f"line {mark.line + 1}: YAML aliases (*name) are not allowed in the config")
        self._depth += 1
        self._nodes += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        if self._nodes > MAX_NODES:
            raise ConfigError(f"more than {MAX_NODES} YAML nodes")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(raw: bytes) -> object:
    """The document in `raw` (UTF-8 YAML), within MAX_CONFIG_BYTES, MAX_DEPTH and without aliases; any
    problem is one ConfigError line."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes; a config is a few KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 (invalid byte at offset {err.start})") from None
    try:
        loader = _LimitedLoader(text)  # the reader refuses non-printable characters already here
    except yaml.YAMLError as err:
        raise ConfigError(f"not valid YAML: {' '.join(str(err).split())[:300]}") from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ConfigError(f"not valid YAML: {' '.join(str(err).split())[:300]}") from None
    except RecursionError:
        raise ConfigError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def parse_bytes(value: object, where: str) -> int:
    """A byte count: an int, or a Kubernetes quantity (`qos.quantity`: `2Gi`, `512Mi`, `1G`, `1e9`), a
    fraction of a byte rounded up as Kubernetes does. Refused: negatives, and two likely typos that
    Kubernetes reads otherwise or not at all: `m`, `u`, `n` (fractions of a byte; `m` meant `Mi`), `K` (`k`
    or `Ki`)."""
    text = value.strip() if isinstance(value, str) else ""
    if text.endswith("m"):
        raise ConfigError(f"{where}: {short(value)} is in thousandths of a byte (suffix m); did you mean Mi?")
    if text[-1:] in _SUB_BYTE:
        unit = text[-1]
        raise ConfigError(f"{where}: {short(value)} is in {_SUB_BYTE[unit]} of a byte (suffix {unit}); "
                          "write a whole number of bytes or Ki, Mi, Gi")
    if text.endswith("K"):
        raise ConfigError(
            f"{where}: {short(value)}: K is not a Kubernetes suffix; write k (1000) or Ki (1024)")
    if isinstance(value, str) and len(value) > 64:
        raise ConfigError(f"{where}: expected a byte quantity like 2Gi, got {short(value)}")
    try:
        n = to_int(value)
    except QuantityError as err:
        raise ConfigError(f"{where}: expected a byte quantity like 2Gi or 1073741824 ({err})") from None
    if n < 0:
        raise ConfigError(f"{where}: a byte quantity may not be negative, got {short(value)}")
    return n


def from_mapping(cls: type[T], data: object, where: str = "") -> T:
    """Build dataclass `cls` from `data` (a mapping from YAML); missing keys take their defaults."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or '<top>'}: expected a mapping, got {type(data).__name__}")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(map(str, data)) - set(fields))
    if unknown:
        prefix = f"{where}." if where else ""
        retired: dict[str, str] = getattr(cls, "RETIRED", {})
        if unknown[0] in retired:
            raise ConfigError(f"{prefix}{unknown[0]}: no longer a setting ({retired[unknown[0]]}); delete it")
        raise ConfigError(
            f"{prefix}{_key(unknown[0])}: unknown field (known: {', '.join(sorted(fields))})"
        )
    no_default = dataclasses.MISSING
    missing = [n for n, f in fields.items()
               if n not in data and f.default is no_default and f.default_factory is no_default]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: required" if where else f"{missing[0]}: required")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else str(name)
        kwargs[name] = _convert(hints[name], value, path)
        check_bound(cls, name, kwargs[name], path)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(_qualify(where, str(err))) from err


def check_bound(cls: type, name: str, value: object, where: str) -> None:
    """Refuse a number outside the range declared for field `name` of `cls` (if it declares one): one line
    naming `where`, the range and a short prefix of the value. The NodeSLO source checks through it too."""
    bounds = bounds_of(cls).get(name) if dataclasses.is_dataclass(cls) else None
    if bounds is None or value is None:
        return
    why = bounds.refusal(value)
    if why is not None:
        raise ConfigError(f"{where}: {why}")


_FIELD_FIRST = re.compile(r"^[A-Za-z_][\w\[\]]*(?:\.[A-Za-z_][\w\[\]]*)*:")


def _qualify(where: str, msg: str) -> str:
    """Give a dataclass's own error message the full dotted path of the field it names."""
    if not where or msg.startswith(where + "."):
        return msg
    last = where.rsplit(".", 1)[-1]
    section = last.split("[", 1)[0]
    if msg.startswith((section + ".", section + ":")):  # it names its section ("node.cpus: …", "api: …")
        return where[: len(where) - len(last)] + last + msg[len(section):]
    if _FIELD_FIRST.match(msg):
        return f"{where}.{msg}"
    return f"{where}: {msg}"


def _convert(tp: Any, value: object, where: str) -> Any:
    """`value` as type `tp`, or ConfigError naming `where`."""
    allowed = choices_of(tp)
    if allowed is not None:
        return _choice(allowed, value, where)
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _union(tp, value, where)
    if origin in (tuple, list):
        return _sequence(tp, origin, value, where)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {short(value)}")
        return dict(value)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp, value, where)
    return _scalar(tp, value, where)


def _union(tp: Any, value: object, where: str) -> Any:
    """The first member type that takes `value` (so `int | str` keeps 3 an int); null only if optional."""
    args = [a for a in get_args(tp) if a is not type(None)]
    if value is None:
        if len(args) != len(get_args(tp)):
            return None
        raise ConfigError(f"{where}: may not be null")
    errors = []
    for arg in args:
        try:
            return _convert(arg, value, where)
        except ConfigError as err:
            errors.append(str(err))
    raise ConfigError(errors[0])


def _choice(allowed: tuple[object, ...], value: object, where: str) -> object:
    """`value` if its field's annotation allows it (`Literal[...]`, `bool`)."""
    why = choice_refusal(allowed, value)
    if why is not None:
        raise ConfigError(f"{where}: {why}")
    return value


def _sequence(tp: Any, origin: Any, value: object, where: str) -> tuple[Any, ...] | list[Any]:
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: expected a list, got {short(value)}")
    targs = get_args(tp)
    item = targs[0] if targs else Any
    items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else list(items)


def _enum(tp: type[enum.Enum], value: object, where: str) -> enum.Enum:
    for member in tp:
        if value in (member.value, member.name):
            return member
    allowed = ", ".join(repr(m.value) for m in tp)
    raise ConfigError(f"{where}: must be one of {allowed}, got {short(value)}")


def _scalar(tp: Any, value: object, where: str) -> Any:
    """int, float (finite) and str, each strictly: `true` is not 1 (bool is a choice: `_choice`)."""
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -INT64_MAX <= value <= INT64_MAX:
                raise ConfigError(f"{where}: out of range, got {short(value)}")
            return value
        raise ConfigError(f"{where}: expected an integer, got {short(value)}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300:
            if not math.isfinite(float(value)):
                raise ConfigError(f"{where}: expected a finite number, got {short(value)}")
            return float(value)
        raise ConfigError(f"{where}: expected a finite number, got {short(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {short(value)}")
    raise ConfigError(f"{where}: cannot load a value of type {tp!r}")
