"""Build frozen config dataclasses from plain YAML data, naming the field whenever something is wrong.

Every config dataclass in the agent is loaded through `from_mapping`: unknown keys, wrong types and values
its `__post_init__` rejects all raise `ConfigError` with the dotted path of the field.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from qos.quantity import QuantityError, to_int

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is wrong; the message starts with the dotted path of the field."""


def parse_bytes(value: object, where: str) -> int:
    """A byte count: an int, or a Kubernetes quantity (`qos.quantity`: `2Gi`, `512Mi`, `1G`, `1e9`), a
    fraction of a byte rounded up as Kubernetes does. Refused: negatives, and two likely typos that
    Kubernetes reads otherwise or not at all: `m` (thousandths of a byte; meant `Mi`), `K` (`k` or `Ki`)."""
    text = value.strip() if isinstance(value, str) else ""
    if text.endswith("m"):
        raise ConfigError(f"{where}: {value!r} is in thousandths of a byte (suffix m); did you mean Mi?")
    if text.endswith("K"):
        raise ConfigError(f"{where}: {value!r}: K is not a Kubernetes suffix; write k (1000) or Ki (1024)")
    try:
        n = to_int(value)
    except QuantityError as err:
        raise ConfigError(f"{where}: expected a byte quantity like 2Gi or 1073741824 ({err})") from None
    if n < 0:
        raise ConfigError(f"{where}: a byte quantity may not be negative, got {value!r}")
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
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown field (known: {', '.join(sorted(fields))})"
        )
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else str(name)
        kwargs[name] = _convert(hints[name], value, path)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(_qualify(where, str(err))) from err


_FIELD_FIRST = re.compile(r"^[A-Za-z_][\w\[\]]*(?:\.[A-Za-z_][\w\[\]]*)*:")


def _qualify(where: str, msg: str) -> str:
    """Give a dataclass's own error message the full dotted path of the field it names."""
    if not where or msg.startswith(where + "."):
        return msg
    last = where.rsplit(".", 1)[-1]
    section = last.split("[", 1)[0]
    if msg.startswith(section + "."):  # the message already names its section (e.g. "node.cpus: …")
        return where[: len(where) - len(last)] + last + msg[len(section):]
    if _FIELD_FIRST.match(msg):
        return f"{where}.{msg}"
    return f"{where}: {msg}"


def _convert(tp: Any, value: object, where: str) -> Any:
    """`value` as type `tp`, or ConfigError naming `where`."""
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _union(tp, value, where)
    if origin is typing.Literal:
        return _literal(tp, value, where)
    if origin in (tuple, list):
        return _sequence(tp, origin, value, where)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
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


def _literal(tp: Any, value: object, where: str) -> Any:
    if value in get_args(tp):
        return value
    allowed = ", ".join(repr(a) for a in get_args(tp))
    raise ConfigError(f"{where}: must be one of {allowed}, got {value!r}")


def _sequence(tp: Any, origin: Any, value: object, where: str) -> tuple[Any, ...] | list[Any]:
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    targs = get_args(tp)
    item = targs[0] if targs else Any
    items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else list(items)


def _enum(tp: type[enum.Enum], value: object, where: str) -> enum.Enum:
    for member in tp:
        if value in (member.value, member.name):
            return member
    allowed = ", ".join(repr(m.value) for m in tp)
    raise ConfigError(f"{where}: must be one of {allowed}, got {value!r}")


def _scalar(tp: Any, value: object, where: str) -> Any:
    """bool, int, float (finite) and str, each strictly: YAML's `1` is not true, `true` is not 1."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    raise ConfigError(f"{where}: cannot load a value of type {tp!r}")
