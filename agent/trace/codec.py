"""The trace's encoding of the policies' inputs and outputs: plain JSON values that decode to equal objects.

Dataclasses and named tuples of `qos` (the snapshot's parts, actions, policy states and settings) are tagged
with their class; tuples, sets, mappings and enums are tagged too, so what decodes is what was encoded, float
for float (JSON keeps a float's shortest repr, which reads back exactly). Only classes of `qos` and the
trace's own are ever made from a trace: a trace is data, never code.

The snapshot's workloads, the bulk of a tick, are encoded apart (`WorkloadTable`): each distinct workload
less its usage once per trace file, then per tick one short row of its usage.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from qos.model import NodeSnapshot, Resources, Source, Tier, Usage, Workload

_ALLOWED = ("qos.", "agent.trace.")
_classes: dict[str, type] = {}


class TraceError(ValueError):
    """A trace that cannot be read: names the file and what is wrong."""


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _cls(name: str) -> type:
    cls = _classes.get(name)
    if cls is not None:
        return cls
    if not name.startswith(_ALLOWED):
        raise TraceError(f"class {name!r} is not one a trace may name")
    module, _, qual = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), qual)
    except (ImportError, AttributeError) as err:
        raise TraceError(f"class {name!r} is not known to this agent: {err}") from None
    if not isinstance(found, type):
        raise TraceError(f"{name!r} is not a class")
    _classes[name] = found
    return found


def encode(x: Any) -> Any:
    """`x` as JSON values (see the module's docstring)."""
    if x is None or (isinstance(x, bool | int | str) and not isinstance(x, enum.Enum)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"f": repr(x)}
    if isinstance(x, enum.Enum):
        return {"e": _name(type(x)), "v": x.value}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"@": _name(type(x)),
                "v": {f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}}
    if isinstance(x, tuple):
        if hasattr(type(x), "_fields"):  # a NamedTuple
            return {"@": _name(type(x)), "t": [encode(v) for v in x]}
        return {"t": [encode(v) for v in x]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, frozenset | set):
        return {"s": sorted((encode(v) for v in x), key=repr)}
    if isinstance(x, Mapping):
        return {"m": [[encode(k), encode(v)] for k, v in x.items()]}
    raise TypeError(f"the trace cannot encode a {type(x).__name__}")


def decode(x: Any) -> Any:
    """The object `encode` made `x` from."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "@" in x:
        cls = _cls(x["@"])
        if "t" in x:
            return cls(*(decode(v) for v in x["t"]))
        return cls(**{k: decode(v) for k, v in x["v"].items()})
    if "t" in x:
        return tuple(decode(v) for v in x["t"])
    if "e" in x:
        return _cls(x["e"])(x["v"])
    if "s" in x:
        return frozenset(decode(v) for v in x["s"])
    if "m" in x:
        return {decode(k): decode(v) for k, v in x["m"]}
    if "f" in x:
        return float(x["f"])
    raise TraceError(f"unknown value in a trace: {sorted(x)}")


_SOURCES = {s.value: s for s in Source}
_TIERS = {t.value: t for t in Tier}


# A workload's fields but its usage and the usage's age (one C call: this runs for every workload every tick).
_static = operator.attrgetter("key", "name", "source", "tier", "be", "priority", "cgroup", "requests",
                              "started_at", "namespace", "app_id", "container_seq", "terminating", "pids",
                              "protected")


def _definition(s: tuple[Any, ...]) -> list[Any]:
    """`_static`'s tuple as JSON values: enums by value, the requests as two numbers."""
    return [s[0], s[1], s[2].value, s[3].value, s[4], s[5], s[6], s[7].milli_cpu, s[7].memory_bytes, *s[8:]]


def _parts(d: list[Any]) -> tuple[Any, ...]:
    """A definition's fields as `Workload` takes them, made once per definition."""
    try:
        return (d[0], d[1], _SOURCES[d[2]], _TIERS[d[3]], d[4], d[5], d[6], Resources(d[7], d[8]), *d[9:])
    except (KeyError, IndexError, TypeError):
        raise TraceError(f"a workload definition that cannot be read: {d!r:.200}") from None


def _setters(cls: Any) -> tuple[Any, ...] | None:
    """The slot setters of a frozen dataclass without checks of its own (None: it has some, build it)."""
    names = [f.name for f in dataclasses.fields(cls)]
    if hasattr(cls, "__post_init__") or names != list(getattr(cls, "__slots__", ())):
        return None
    return tuple(getattr(cls, name).__set__ for name in names)


# A replay builds some 200 workloads a tick: filled in slot by slot, a Workload costs two thirds of what its
# frozen __init__ does (one object.__setattr__ per field). Only where the class checks nothing itself.
_WORKLOAD_SETTERS = _setters(Workload)
_USAGE_SETTERS = _setters(Usage)
_new = object.__new__


def _usage(cpu: float | None, ws: int | None, thr: float | None) -> Usage:
    if _USAGE_SETTERS is None:
        return Usage(cpu, ws, thr)
    u = _new(Usage)
    a, b, c = _USAGE_SETTERS
    a(u, cpu)
    b(u, ws)
    c(u, thr)
    return u


def _slow_build(p: tuple[Any, ...], usage: Usage, age: float) -> Workload:
    make: Any = Workload
    built: Workload = make(*p[:8], usage, age, *p[8:])
    return built


def _builder() -> Callable[[tuple[Any, ...], Usage, float], Workload]:
    """`_slow_build`, a slot at a time (written out: a loop over the setters costs half of what it saves)."""
    if _WORKLOAD_SETTERS is None or len(_WORKLOAD_SETTERS) != 17:
        return _slow_build
    (key, name, source, tier, be, priority, cgroup, requests, usage_, age_, started_at, namespace, app_id,
     container_seq, terminating, pids, protected) = _WORKLOAD_SETTERS

    def build(p: tuple[Any, ...], usage: Usage, age: float) -> Workload:
        w = _new(Workload)
        key(w, p[0])
        name(w, p[1])
        source(w, p[2])
        tier(w, p[3])
        be(w, p[4])
        priority(w, p[5])
        cgroup(w, p[6])
        requests(w, p[7])
        usage_(w, usage)
        age_(w, age)
        started_at(w, p[8])
        namespace(w, p[9])
        app_id(w, p[10])
        container_seq(w, p[11])
        terminating(w, p[12])
        pids(w, p[13])
        protected(w, p[14])
        return w
    return build


_build = _builder()


class WorkloadTable:
    """The recording side: a workload less its usage gets a number the first time it is seen in a file."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}

    def rows(self, workloads: tuple[Workload, ...]) -> tuple[list[list[Any]], list[list[Any]]]:
        """(new definitions `[id, *fields]`, a row per workload `[id, cpu, working set, throttled, age]`)."""
        defs: list[list[Any]] = []
        rows: list[list[Any]] = []
        ids = self._ids
        for w in workloads:
            s = _static(w)
            i = ids.get(s)
            if i is None:
                i = ids[s] = len(ids)
                defs.append([i, *_definition(s)])
            u = w.usage
            rows.append([i, u.milli_cpu, u.memory_working_set_bytes, u.cpu_throttled_ratio, w.sample_age_s])
        return defs, rows


class WorkloadReader:
    """The replaying side: definitions by number, and the workload of the last row per number, so a
    workload whose usage did not change is the same object again."""

    def __init__(self) -> None:
        self._defs: dict[int, tuple[Any, ...]] = {}
        self._last: dict[int, tuple[list[Any], Workload]] = {}

    def reset(self) -> None:
        self._defs.clear()
        self._last.clear()

    def workloads(self, defs: list[list[Any]], rows: list[list[Any]]) -> tuple[Workload, ...]:
        for d in defs:
            self._defs[d[0]] = _parts(d[1:])
        out = []
        last = self._last
        for row in rows:
            i = row[0]
            seen = last.get(i)
            if seen is not None and seen[0] == row:
                out.append(seen[1])
                continue
            try:
                w = _build(self._defs[i], _usage(row[1], row[2], row[3]), row[4])
            except KeyError:
                raise TraceError(f"workload {i} used before it is defined") from None
            last[i] = (row, w)
            out.append(w)
        return tuple(out)


_REST = tuple(f.name for f in dataclasses.fields(NodeSnapshot) if f.name != "workloads")


def snapshot_rest(snap: NodeSnapshot) -> list[Any]:
    """Every field of the snapshot but its workloads, in the dataclass's order."""
    return [encode(getattr(snap, name)) for name in _REST]


def snapshot_of(rest: list[Any], workloads: tuple[Workload, ...],
                last: dict[str, tuple[Any, Any]] | None = None) -> NodeSnapshot:
    """The snapshot of `snapshot_rest`'s fields and `workloads`; `last` (kept by the caller from tick to
    tick) gives back a field's value decoded at the tick before when it was encoded the same."""
    if len(rest) != len(_REST):
        raise TraceError(f"a snapshot of {len(rest)} fields, this agent's has {len(_REST)}")
    fields: dict[str, Any] = {}
    for name, raw in zip(_REST, rest, strict=True):
        seen = last.get(name) if last is not None else None
        if seen is not None and seen[0] == raw:
            fields[name] = seen[1]
            continue
        fields[name] = value = decode(raw)
        if last is not None:
            last[name] = (raw, value)
    return NodeSnapshot(workloads=workloads, **fields)
