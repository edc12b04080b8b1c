"""Turn cgroup counters and workload lists into one immutable NodeSnapshot per tick.

CPU figures are rates, so the collector keeps the previous counter of each cgroup (keyed by cgroup path) and
reports a workload's CPU as missing (None) on its first sighting. A cgroup that vanished between listing and
reading is a workload that ended: it is dropped from the snapshot, never an error.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgroups.errors import CgroupError, CgroupGone
from cgroups.node import NodeCpuMeter, read_meminfo
from cgroups.parsers import psi_some_total
from cgroups.reader import CgroupReader, CgroupSample
from qos.model import BeTierState, IoSample, NetworkSample, NodeSnapshot, Resources, Source, Usage, Workload

log = logging.getLogger("coloc.collect")


_Prev = tuple[float, int, int, int]  # monotonic time, cpu ns, throttled periods, periods

# The workload readers' options (CgroupReader's keywords): per BE workload nothing reads the throttling
# counters (they are kept for the tiers), the memory limit or memory pressure, and memory.stat is read
# again within 5 s only when the usage moved (see CgroupReader). At 200 workloads that is 300 reads a tick
# fewer, about a third of the tick's cost (bench/footprint.py).
WORKLOAD_READER: dict[str, Any] = {"memory_limit": False, "throttling": False, "memory_stat_every_s": 5.0}

_FIELDS = tuple(f.name for f in dataclasses.fields(Workload))
_fields_of = operator.attrgetter(*_FIELDS)
_USAGE, _AGE, _PIDS, _TERMINATING = (_FIELDS.index(n)
                                     for n in ("usage", "sample_age_s", "pids", "terminating"))


def _measured(w: Workload, usage: Usage, pids: int, terminating: bool) -> Workload:
    """`dataclasses.replace(w, usage=usage, sample_age_s=0.0, pids=pids, terminating=terminating)` at half
    its cost (1.9 against 3.3 µs): it runs for every workload every tick."""
    v = list(_fields_of(w))
    v[_USAGE], v[_AGE], v[_PIDS], v[_TERMINATING] = usage, 0.0, pids, terminating
    return Workload(*v)


@dataclass(slots=True)
class _Sampled:
    workloads: list[Workload] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    hp_psi: float | None = None
    hp_throttled: float | None = None  # the worst HP workload's share of CFS periods throttled
    spared: list[Usage] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TierPaths:
    root: str  # "" = the agent's cgroup root itself
    besteffort: str


class Collector:
    """Samples the root, the tiers and every workload; `collect` is called once per tick."""

    def __init__(self, reader: CgroupReader, tiers: TierPaths, capacity: Resources, cpus: tuple[int, ...],
                 scope: str, interval_s: float, proc_root: str = "/proc",
                 be_reader: CgroupReader | None = None, hp_reader: CgroupReader | None = None,
                 network: Callable[[tuple[Workload, ...]], NetworkSample] | None = None,
                 io: Callable[[tuple[Workload, ...]], IoSample] | None = None) -> None:
        self._reader = reader  # the root and the tiers
        self._network = network  # the egress shaper's last reading, given this tick's workloads
        self._io = io  # the disk guard's reading, given this tick's workloads
        # BE cgroups are the many (hundreds of YARN containers); nobody reads their PSI, so a reader that
        # skips the pressure files saves two reads per cgroup (bench/collect.py: psi vs no_psi).
        self._be_reader = be_reader or reader
        self._hp_reader = hp_reader or reader
        self._tiers = tiers
        self._capacity = capacity
        self._cpus = cpus
        self._scope = scope
        self._interval_s = interval_s
        self._proc_root = proc_root
        self._prev: dict[str, _Prev] = {}
        self._stall_prev: dict[str, tuple[float, int]] = {}
        self._fast_stall: dict[str, tuple[float, int]] = {}
        # (monotonic time, root cpu ns, besteffort cpu ns): the fast path adds points between ticks so the
        # tier rates at a tick cover a short recent window instead of the whole interval.
        self._tier_hist: deque[tuple[float, int, int]] = deque(maxlen=256)
        self.tier_window_s = min(interval_s, 0.25)
        self._node_cpu = NodeCpuMeter(Path(proc_root))
        self.last_duration_s = 0.0
        self.errors: list[str] = []

    def close(self) -> None:
        for r in {id(r): r for r in (self._be_reader, self._hp_reader) if r is not self._reader}.values():
            r.close()

    def _rate(self, rel: str, s: CgroupSample, now: float) -> Usage:
        prev = self._prev.get(rel)
        cpu_ns = s.cpu_usage_ns
        self._prev[rel] = (now, cpu_ns, s.nr_throttled, s.nr_periods)
        ws = s.memory_working_set_bytes
        if prev is None:
            return Usage(None, ws, None)
        at, prev_ns, prev_throttled, prev_periods = prev
        if now <= at or cpu_ns < prev_ns:
            return Usage(None, ws, None)
        milli = (cpu_ns - prev_ns) / 1e6 / (now - at)
        periods = s.nr_periods - prev_periods
        throttled = (s.nr_throttled - prev_throttled) / periods if periods > 0 else 0.0
        return Usage(milli, ws, throttled)

    def _sample(self, rel: str, now: float) -> tuple[CgroupSample, Usage] | None:
        try:
            s = self._reader.sample(rel)
        except CgroupError as err:
            self._unreadable(self._reader, rel, err)
            return None
        return s, self._rate(rel, s, now)

    def _unreadable(self, reader: CgroupReader, rel: str, err: CgroupError) -> None:
        """`rel` could not be sampled: gone (a workload that ended), or an error noted for this tick."""
        reader.forget(rel)
        if isinstance(err, CgroupGone):
            self._prev.pop(rel, None)
            self._stall_prev.pop(rel, None)
        else:
            # One unreadable cgroup (no fds left, a format we do not know) must not stop QoS for the node;
            # it makes this tick's data incomplete, so evictions hold (stale) while suppression goes on.
            self.errors.append(f"{rel}: {err}")

    def collect(self, workloads: Iterable[Workload], terminating: frozenset[str],
                stale: Mapping[str, str], now_wall: float | None = None) -> NodeSnapshot:
        started = time.perf_counter()
        now = time.monotonic()
        stale = dict(stale)
        self.errors = []
        sampled = self._sample_workloads(workloads, terminating, now)
        root_u, be_u = self._tier_usage(now, stale)
        be_u = _without(be_u, sampled.spared)
        hp_u = Usage(
            _sub(root_u.milli_cpu, be_u.milli_cpu),
            _isub(root_u.memory_working_set_bytes, be_u.memory_working_set_bytes),
            sampled.hp_throttled,
        )
        node_u, system_u = self._node_usage(root_u, stale)
        knobs = self._be_knobs()
        if knobs.missing:
            stale.setdefault("cgroups", knobs.missing)
        self._forget_unseen(sampled.seen)
        if self.errors:
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            stale.setdefault("cgroups", f"cannot read {self.errors[0]}{more}")
        self.last_duration_s = time.perf_counter() - started
        return NodeSnapshot(
            taken_at=now_wall if now_wall is not None else time.time(),
            capacity=self._capacity,
            cpus=self._cpus,
            node_usage=node_u,
            hp_usage=hp_u,
            be_usage=be_u,
            system_usage=system_u,
            workloads=tuple(sampled.workloads),
            be_tier=knobs,
            hp_cpu_pressure_some_avg10=sampled.hp_psi,
            stale=stale,
            interval_s=self._interval_s,
            network=self._network(tuple(sampled.workloads)) if self._network is not None else None,
            io=self._io(tuple(sampled.workloads)) if self._io is not None else None,
        )

    def _sample_workloads(self, workloads: Iterable[Workload], terminating: frozenset[str],
                          now: float) -> _Sampled:
        """Each workload with its usage; the worst HP stall; the usage of protected pods below the BE tier."""
        out = _Sampled()
        listed, seen = out.workloads, out.seen
        hp_reader, be_reader = self._hp_reader, self._be_reader
        below_be = self._tiers.besteffort + "/"
        for w in workloads:
            rel = w.cgroup
            reader = be_reader if w.be else hp_reader
            try:
                sample = reader.sample(rel)
            except CgroupError as err:
                self._unreadable(reader, rel, err)
                sample = None
            seen.add(rel)
            if sample is None:
                if w.source is not Source.LOCAL:
                    # Known to its scheduler but no cgroup yet (launching) or any more (ending): it still
                    # holds its allocation, so it stays, with no usage.
                    going = w.terminating or w.key in terminating
                    listed.append(dataclasses.replace(w, terminating=going))
                continue
            usage = self._rate(rel, sample, now)
            if w.protected and rel.startswith(below_be):
                out.spared.append(usage)  # their usage is not BE usage
            if not w.be and usage.cpu_throttled_ratio is not None:
                out.hp_throttled = max(out.hp_throttled or 0.0, usage.cpu_throttled_ratio)
            if not w.be and sample.cpu_psi_raw:
                stall = self._stall_percent(rel, sample.cpu_psi_raw, now)
                if stall is not None:
                    out.hp_psi = stall if out.hp_psi is None else max(out.hp_psi, stall)
            listed.append(_measured(w, usage, sample.pids or 0, w.terminating or w.key in terminating))
        return out

    def _tier_usage(self, now: float, stale: dict[str, str]) -> tuple[Usage, Usage]:
        """The root's and the BE tier's usage; their CPU over the recent tier window where there is one."""
        root = self._sample(self._tiers.root, now)
        be = self._sample(self._tiers.besteffort, now)
        if root is None:
            stale["cgroups"] = self._why_missing("cgroup root (cgroups.root)", self._tiers.root)
        if be is None:
            stale.setdefault("cgroups", self._why_missing("besteffort tier", self._tiers.besteffort))
        root_u = root[1] if root else Usage()
        be_u = be[1] if be else Usage()
        if root and be:
            # Stamped with the read itself: sampling many workloads first makes `now` tens of ms early.
            self._tier_hist.append((root[0].at, root[0].cpu_usage_ns, be[0].cpu_usage_ns))
            rates = self._tier_rates(self.tier_window_s)
            if rates is not None:
                root_u = dataclasses.replace(root_u, milli_cpu=rates[0])
                be_u = dataclasses.replace(be_u, milli_cpu=rates[1])
        return root_u, be_u

    def _forget_unseen(self, seen: set[str]) -> None:
        """Drop the counters of cgroups no longer listed (the tiers are always kept)."""
        for rel in list(self._prev):
            if rel not in seen and rel not in (self._tiers.root, self._tiers.besteffort):
                del self._prev[rel]
                self._stall_prev.pop(rel, None)
                self._reader.forget(rel)
                self._hp_reader.forget(rel)
                self._be_reader.forget(rel)

    def _stall_percent(self, rel: str, cpu_psi_raw: bytes, now: float) -> float | None:
        """Share of the last window (percent) in which some task of `rel` waited for a CPU.

        Computed from the kernel's cumulative `some total` rather than `avg10`: the averages move only
        every 2 s and lag by seconds, which a sub-second loop cannot use."""
        total = psi_some_total(cpu_psi_raw, "cpu.pressure")
        prev = self._stall_prev.get(rel)
        self._stall_prev[rel] = (now, total)
        if prev is None or now <= prev[0] or total < prev[1]:
            return None
        return min(100.0, (total - prev[1]) / 1e4 / (now - prev[0]))

    def poll_hp_stall(self, rels: list[str]) -> float | None:
        """Worst CPU stall share (0..1) of these HP cgroups since the previous poll (None without PSI)."""
        now = time.monotonic()
        worst: float | None = None
        for rel in rels:
            try:
                raw = self._hp_reader.cpu_psi_raw(rel)
                if not raw:
                    continue
                total = psi_some_total(raw, "cpu.pressure")
            except CgroupError:
                continue
            prev = self._fast_stall.get(rel)
            self._fast_stall[rel] = (now, total)
            if prev is None or now <= prev[0] or total < prev[1]:
                continue
            share = (total - prev[1]) / 1e6 / (now - prev[0])
            worst = share if worst is None else max(worst, share)
        for gone in set(self._fast_stall) - set(rels):
            del self._fast_stall[gone]
        return worst

    def pressure_file(self, rel: str) -> str | None:
        """The cgroup2 `cpu.pressure` the reader samples for `rel` (on hybrid hosts, where the same root/rel
        exists in the unified tree), for a PSI trigger; None where the kernel has none for it."""
        try:
            files = self._hp_reader.files(rel)
        except CgroupError:
            return None
        return next((f for f in files if f.endswith("/cpu.pressure")), None)

    def poll_tiers(self, window_s: float) -> tuple[float, float] | None:
        """Read the root and BE tier counters now; return (root, BE) milli-cores over the last `window_s`."""
        try:
            at, root_ns = self._reader.cpu_usage(self._tiers.root)
            be_ns = self._reader.cpu_usage(self._tiers.besteffort)[1]
        except CgroupError:
            return None
        self._tier_hist.append((at, root_ns, be_ns))
        return self._tier_rates(window_s)

    def _tier_rates(self, window_s: float) -> tuple[float, float] | None:
        if len(self._tier_hist) < 2:
            return None
        t1, r1, b1 = self._tier_hist[-1]
        base = self._tier_hist[0]
        for point in reversed(self._tier_hist):
            if point[0] <= t1 - window_s:
                base = point
                break
        t0, r0, b0 = base
        if t1 <= t0 or r1 < r0 or b1 < b0:
            return None
        dt_ms = (t1 - t0) * 1e3
        return (r1 - r0) / 1e3 / dt_ms, (b1 - b0) / 1e3 / dt_ms

    def _node_usage(self, root_u: Usage, stale: dict[str, str]) -> tuple[Usage, Usage]:
        if self._scope == "cgroup-root":
            return root_u, Usage(0.0 if root_u.milli_cpu is not None else None, 0)
        try:
            node_cpu = self._node_cpu.update()
            mem = read_meminfo(Path(self._proc_root))
        except (OSError, CgroupError) as err:
            stale["node"] = f"cannot read node usage: {err}"
            return Usage(), Usage()
        used_mem = mem.used_bytes
        cpu = node_cpu.milli_cpu if node_cpu is not None else None
        node = Usage(cpu, used_mem)
        system = Usage(_sub(cpu, root_u.milli_cpu, floor=0.0),
                       _isub(used_mem, root_u.memory_working_set_bytes, floor=0))
        return node, system

    def _why_missing(self, what: str, rel: str) -> str:
        """Why a tier's usage is missing, naming its directory: not there, or there but unreadable."""
        where = self._reader.dir(rel)
        return f"{what} {where} {'cannot be read' if self._reader.exists(rel) else 'does not exist'}"

    def _be_knobs(self) -> BeTierState:
        tier = self._tiers.besteffort
        if not self._reader.exists(tier):
            return BeTierState(missing=f"no BE tier to act on: {self._reader.dir(tier)} does not exist")
        try:
            k = self._reader.read_knobs(self._tiers.besteffort)
        except CgroupError:
            return BeTierState()
        quota = None if k.quota_us is None else k.quota_us * 1000 // max(1, k.period_us or 100_000)
        return BeTierState(cpuset=tuple(k.cpuset or ()), quota_milli_cpu=quota, cpu_idle=k.cpu_idle,
                           memory_high_bytes=k.memory_high_bytes)


def _without(be: Usage, spared: list[Usage]) -> Usage:
    """The BE tier's usage less the protected pods below it (they count as HP); unknown if one of theirs is.

    Their rates cover the tick while the tier's covers a shorter recent window, hence the clamp at 0."""
    if not spared:
        return be
    cpu: float | None = be.milli_cpu
    mem: int | None = be.memory_working_set_bytes
    for u in spared:
        cpu = _sub(cpu, u.milli_cpu)
        mem = _isub(mem, u.memory_working_set_bytes)
    return dataclasses.replace(be, milli_cpu=cpu, memory_working_set_bytes=mem)


def _sub(a: float | None, b: float | None, floor: float | None = None) -> float | None:
    if a is None or b is None:
        return None
    v = a - b
    return max(floor, v) if floor is not None else max(0.0, v)


def _isub(a: int | None, b: int | None, floor: int | None = 0) -> int | None:
    if a is None or b is None:
        return None
    v = a - b
    return max(floor, v) if floor is not None else v
