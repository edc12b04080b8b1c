"""How each kind of knob is read, compared, written and loosened, on v1 and on v2.

A knob talks to the files through `KnobIO` (the writer), which owns path checks and counting.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Generic, Protocol, TypeVar

from cgroups.discovery import Hierarchy
from cgroups.errors import InvalidValue
from cgroups.io import V1_FILES, IoLimit, check_device, format_io_max, parse_io_max, parse_throttle
from cgroups.parsers import (
    CpuMax,
    format_cpuset,
    parse_cfs,
    parse_cpu_max,
    parse_cpuset,
    parse_int,
    parse_memory_limit,
)

PAGE = os.sysconf("SC_PAGE_SIZE")


class KnobIO(Protocol):
    @property
    def hierarchy(self) -> Hierarchy: ...

    def read(self, ctrl: str, rel: str, name: str) -> bytes: ...

    def write(self, ctrl: str, rel: str, name: str, value: str) -> None: ...


V = TypeVar("V")


class Knob(Generic[V]):
    name = ""
    ctrl = ""

    def read(self, w: KnobIO, rel: str) -> V:
        raise NotImplementedError

    def write(self, w: KnobIO, rel: str, current: V, value: V) -> None:
        raise NotImplementedError

    def equal(self, a: V, b: V) -> bool:
        return a == b

    def loosest(self, current: V, wanted: V) -> V | None:
        """The loosest of both values, or None if this knob has no parent/child constraint."""
        return None

    def dump(self, value: V) -> Any:
        """The value in JSON form (the journal of holdings, `cgroups/holdings.py`)."""
        return value

    def load(self, data: Any) -> V:
        """A value from its JSON form; ValueError naming what is wrong."""
        return data  # type: ignore[no-any-return]


class _Quota(Knob[CpuMax]):
    name, ctrl = "cpu_quota", "cpu"

    def read(self, w: KnobIO, rel: str) -> CpuMax:
        if w.hierarchy.is_v1("cpu"):
            quota = w.read(self.ctrl, rel, "cpu.cfs_quota_us")
            return parse_cfs(quota, w.read(self.ctrl, rel, "cpu.cfs_period_us"))
        return parse_cpu_max(w.read(self.ctrl, rel, "cpu.max"))

    def write(self, w: KnobIO, rel: str, current: CpuMax, value: CpuMax) -> None:
        if not w.hierarchy.is_v1("cpu"):
            quota = "max" if value.quota_us is None else str(value.quota_us)
            w.write(self.ctrl, rel, "cpu.max", f"{quota} {value.period_us}")
            return
        if current.period_us != value.period_us:
            # v1 has two files; an unlimited quota is valid whatever the parent and children hold,
            # so pass through it while the period changes.
            w.write(self.ctrl, rel, "cpu.cfs_quota_us", "-1")
            w.write(self.ctrl, rel, "cpu.cfs_period_us", str(value.period_us))
        w.write(self.ctrl, rel, "cpu.cfs_quota_us", "-1" if value.quota_us is None else str(value.quota_us))

    def loosest(self, current: CpuMax, wanted: CpuMax) -> CpuMax:
        if current.quota_us is None:
            return CpuMax(None, wanted.period_us) if wanted.quota_us is not None else wanted
        if wanted.quota_us is None:
            return wanted
        if current.quota_us * wanted.period_us > wanted.quota_us * current.period_us:
            return CpuMax(-(-current.quota_us * wanted.period_us // current.period_us), wanted.period_us)
        return wanted

    def dump(self, value: CpuMax) -> Any:
        return [value.quota_us, value.period_us]

    def load(self, data: Any) -> CpuMax:
        if not (isinstance(data, list) and len(data) == 2 and all(v is None or type(v) is int for v in data)
                and data[1] is not None):
            raise ValueError(f"cpu_quota: must be [quota or null, period], got {data!r}")
        return CpuMax(data[0], data[1])


class _Shares(Knob[int]):
    name, ctrl = "cpu_shares", "cpu"

    def _file(self, w: KnobIO) -> str:
        return "cpu.shares" if w.hierarchy.is_v1("cpu") else "cpu.weight"

    def read(self, w: KnobIO, rel: str) -> int:
        f = self._file(w)
        return parse_int(w.read(self.ctrl, rel, f), f)

    def write(self, w: KnobIO, rel: str, current: int, value: int) -> None:
        try:
            w.write(self.ctrl, rel, self._file(w), str(value))
        except InvalidValue as e:
            # The kernel gives an idle group the fixed idle weight and refuses to change it.
            if w.read(self.ctrl, rel, "cpu.idle").strip() == b"1":
                raise InvalidValue(
                    f"{e}; the cgroup has cpu.idle=1 and the kernel refuses a weight change while it is idle",
                    e.path,
                ) from None
            raise


class _Cpuset(Knob[frozenset[int]]):
    name, ctrl = "cpuset", "cpuset"

    def read(self, w: KnobIO, rel: str) -> frozenset[int]:
        return frozenset(parse_cpuset(w.read(self.ctrl, rel, "cpuset.cpus")))

    def write(self, w: KnobIO, rel: str, current: frozenset[int], value: frozenset[int]) -> None:
        w.write(self.ctrl, rel, "cpuset.cpus", format_cpuset(value))

    def loosest(self, current: frozenset[int], wanted: frozenset[int]) -> frozenset[int]:
        return current | wanted

    def dump(self, value: frozenset[int]) -> Any:
        return sorted(value)

    def load(self, data: Any) -> frozenset[int]:
        if not isinstance(data, list) or not all(type(c) is int and c >= 0 for c in data):
            raise ValueError(f"cpuset: must be a list of CPU numbers, got {data!r}")
        return frozenset(data)


class _Idle(Knob[bool]):
    name, ctrl = "cpu_idle", "cpu"

    def read(self, w: KnobIO, rel: str) -> bool:
        return parse_int(w.read(self.ctrl, rel, "cpu.idle"), "cpu.idle") != 0

    def write(self, w: KnobIO, rel: str, current: bool, value: bool) -> None:
        w.write(self.ctrl, rel, "cpu.idle", "1" if value else "0")


class _Memory(Knob[int | None]):
    ctrl = "memory"

    def __init__(self, name: str, v1_file: str, v2_file: str) -> None:
        self.name, self.v1_file, self.v2_file = name, v1_file, v2_file

    def _file(self, w: KnobIO) -> str:
        return self.v1_file if w.hierarchy.is_v1("memory") else self.v2_file

    def read(self, w: KnobIO, rel: str) -> int | None:
        f = self._file(w)
        return parse_memory_limit(w.read(self.ctrl, rel, f), f)

    def write(self, w: KnobIO, rel: str, current: int | None, value: int | None) -> None:
        unlimited = "-1" if w.hierarchy.is_v1("memory") else "max"
        w.write(self.ctrl, rel, self._file(w), unlimited if value is None else str(value))

    def equal(self, a: int | None, b: int | None) -> bool:
        # The kernel keeps limits in pages and reads back the rounded-down value.
        if a is None or b is None:
            return a is b
        return a // PAGE == b // PAGE

    def loosest(self, current: int | None, wanted: int | None) -> int | None:
        if current is None or wanted is None:
            return None
        return max(current, wanted)


class _State(Knob[str]):
    """v1 freezer.state (THAWED/FROZEN) or v2 cgroup.freeze (0/1), as the v1 words."""

    name = "freeze"

    def __init__(self) -> None:
        self.ctrl = "freezer"

    def read(self, w: KnobIO, rel: str) -> str:
        if w.hierarchy.is_v1("freezer"):
            return w.read("freezer", rel, "freezer.state").strip().decode()
        return "FROZEN" if w.read("freezer", rel, "cgroup.freeze").strip() == b"1" else "THAWED"

    def write(self, w: KnobIO, rel: str, current: str, value: str) -> None:
        if w.hierarchy.is_v1("freezer"):
            w.write("freezer", rel, "freezer.state", value)
        else:
            w.write("freezer", rel, "cgroup.freeze", "1" if value == "FROZEN" else "0")


QUOTA, SHARES, CPUSET, IDLE, FREEZE = _Quota(), _Shares(), _Cpuset(), _Idle(), _State()
MEM_LIMIT = _Memory("memory_limit", "memory.limit_in_bytes", "memory.max")
MEM_HIGH = _Memory("memory_high", "memory.soft_limit_in_bytes", "memory.high")


class _Protection(_Memory):
    """v2 `memory.min` / `memory.low` (bytes, 0 = none). v1 has neither (an upstream v1 kernel has no
    memory protection): a read there fails like a missing file."""

    def __init__(self, name: str, v2_file: str) -> None:
        super().__init__(name, "", v2_file)

    def read(self, w: KnobIO, rel: str) -> int | None:
        if w.hierarchy.is_v1("memory"):
            raise InvalidValue(f"{self.v2_file} does not exist on cgroup v1")
        return super().read(w, rel)

    def write(self, w: KnobIO, rel: str, current: int | None, value: int | None) -> None:
        w.write(self.ctrl, rel, self.v2_file, str(value or 0))

    def loosest(self, current: int | None, wanted: int | None) -> int | None:
        return None  # no parent/child write constraint: the kernel bounds the effective value instead


class _Burst(Knob[int]):
    """CFS burst in µs: v1 `cpu.cfs_burst_us` (upstream kernel ≥ 5.14), v2 `cpu.max.burst`."""

    name, ctrl = "cpu_burst", "cpu"

    def _file(self, w: KnobIO) -> str:
        return "cpu.cfs_burst_us" if w.hierarchy.is_v1("cpu") else "cpu.max.burst"

    def read(self, w: KnobIO, rel: str) -> int:
        f = self._file(w)
        return parse_int(w.read(self.ctrl, rel, f), f)

    def write(self, w: KnobIO, rel: str, current: int, value: int) -> None:
        w.write(self.ctrl, rel, self._file(w), str(value))


MEM_MIN = _Protection("memory_min", "memory.min")
MEM_LOW = _Protection("memory_low", "memory.low")
BURST = _Burst()
class _IoMax(Knob[IoLimit]):
    """One device's caps: v2 `io.max`, v1 the four `blkio.throttle.*_device` files (0 lifts a v1 cap)."""

    ctrl = "blkio"  # v1's mount; on v2 the unified one, like every controller

    def __init__(self, dev: str) -> None:
        self.dev = check_device(dev)
        self.name = f"{IO_MAX}{dev}"

    def read(self, w: KnobIO, rel: str) -> IoLimit:
        if not w.hierarchy.is_v1("blkio"):
            return parse_io_max(w.read(self.ctrl, rel, "io.max"), self.dev)
        rbps, wbps, riops, wiops = (parse_throttle(w.read(self.ctrl, rel, f), self.dev, f) for f in V1_FILES)
        return IoLimit(rbps, wbps, riops, wiops)

    def write(self, w: KnobIO, rel: str, current: IoLimit, value: IoLimit) -> None:
        if not w.hierarchy.is_v1("blkio"):
            w.write(self.ctrl, rel, "io.max", format_io_max(self.dev, value))
            return
        for f, old, new in zip(V1_FILES, current.values(), value.values(), strict=True):
            if old != new:
                w.write(self.ctrl, rel, f, f"{self.dev} {new or 0}")

    def dump(self, value: IoLimit) -> Any:
        return list(value.values())

    def load(self, data: Any) -> IoLimit:
        if not isinstance(data, list) or len(data) != 4:
            raise ValueError(f"{self.name}: must be [rbps, wbps, riops, wiops], got {data!r}")
        return IoLimit(*data)


IO_MAX = "io_max@"


@functools.cache
def io_max(dev: str) -> Knob[IoLimit]:
    """The caps knob of one disk (`MAJ:MIN`)."""
    return _IoMax(dev)


KNOBS: dict[str, Knob[Any]] = {k.name: k for k in (QUOTA, SHARES, CPUSET, IDLE, FREEZE, MEM_LIMIT, MEM_HIGH,
                                                   MEM_MIN, MEM_LOW, BURST)}


def knob_named(name: str) -> Knob[Any] | None:
    """The knob a journal names (None: no such knob)."""
    knob = KNOBS.get(name)
    if knob is None and name.startswith(IO_MAX):
        try:
            return io_max(name.removeprefix(IO_MAX))
        except InvalidValue:
            return None
    return knob
