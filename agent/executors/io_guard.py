"""The disk guard: reads what HP and BE do on the guarded disks, gives the loop an `IoSample` each tick, and
sets the BE tier's IO caps the policy (`qos.io`) asks for.

Reading: the cgroup root's and the BE tier's IO counters per disk (the root less the BE tier is HP) and the
IO pressure of the busiest HP cgroups, every `poll_s` (0.02 s) while BE does more IO than its floor,
`calm_poll_s` (0.1 s) otherwise, kept over a short history; a tick's sample carries the rates over the last
`window_s` (0.3 s, not the loop's second) and HP's IO pressure over the last `stall_window_s` (0.1 s), so a
cap follows HP within a fraction of a second. Between ticks the guard wakes the loop when the policy would
act: HP waiting for IO while BE is not at its floor, or HP idle on a disk BE is capped on.

Writing: `SetBeIoLimit` through the one writer under the moving holder `BE_IO` (v2 `io.max`, v1
`blkio.throttle.*_device`; through systemd on a systemd unit, so daemon-reload keeps it). v2's throttling is
hierarchical: the tier's cap holds everything below it. v1's is not (a parent's cap does not hold a child's
IO, measured: tests/io/test_io_guard.py): there the cap is also spread over every cgroup below the tier, each
leaf an equal share, followed at every tick while it is in force (BE pods and YARN containers come and go).
A clean exit puts back what was there before the agent; after a crash the next run does
(`cgroups/holdings.py`). Caps another
writer set before the agent held the knob are the floor's bound as well (`IoSample.static`): the agent
only ever tightens them.

On cgroup v1, buffered writeback is issued by the kernel's flusher threads and charged to no cgroup: the
caps hold BE's direct IO and reads, not its buffered writes (v2 charges them to the cgroup that dirtied the
pages). See docs/io.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.config.io import IoConfig
from agent.published import ActionRecord, Outcome
from cgroups.errors import CgroupError, CgroupGone
from cgroups.holdings import Holder
from cgroups.io import IoLimit, IoStat, disk_of, disks_of
from cgroups.io_meter import IoMeter
from cgroups.knobs import IO_MAX, io_max
from cgroups.writer import CgroupWriter
from qos.actions import ActionKind, SetBeIoLimit
from qos.model import NO_CAP, DiskSample, IoCap, IoRate, IoSample, Workload

log = logging.getLogger("coloc.io")

BE_IO = Holder("be_io", moving=True)
"""The BE tier's IO caps: they move with HP (floor, doubled, lifted); held from the first write to a clean
exit."""

Recorder = Callable[[str, str, str, Outcome, str, Mapping[str, float]], ActionRecord]
SETTLE_AFTER_SAMPLES = 3  # the first samples have no rates: what an earlier run left waits for a decision
# v1: a cgroup below the tier whose share was set this long ago is read back (and re-asserted) again; in
# between, a tick lists the tier's cgroups but does not read each one's four files (58 ms a tick at 200
# cgroups, against ~4 ms; the path checks' realpath dominate)
RECHECK_S = 5.0


@dataclass(slots=True)
class Poll:
    """One reading: when (monotonic), HP's and the BE tier's counters per disk, HP cgroups' IO wait (us)."""

    at: float
    hp: dict[str, IoStat]
    be: dict[str, IoStat]
    stall_us: dict[str, int]


@dataclass(frozen=True, slots=True)
class NodeSloBlkio:
    """The NodeSLO's `blkioQOS` as the guard reads it: the BE class's caps by device name, and what of it the
    agent does not act on (`qos.blkio_qos`)."""

    caps: Callable[[], Mapping[str, IoCap]]
    unsupported: Callable[[], list[str]]


@dataclass(slots=True)
class GuardStats:
    """What the guard did, for /metrics and status."""

    wakes: int = 0
    sets: int = 0
    errors: int = 0
    last_error: str = ""
    by_dev: dict[str, IoCap] = field(default_factory=dict)  # the caps the policy last asked for


def _minus(a: IoStat | None, b: IoStat | None) -> IoStat:
    a, b = a or IoStat(), b or IoStat()
    return IoStat(max(0, a.rbytes - b.rbytes), max(0, a.wbytes - b.wbytes), max(0, a.rios - b.rios),
                  max(0, a.wios - b.wios))


def _rate(new: IoStat, old: IoStat, dt: float) -> IoRate:
    return IoRate(max(0, new.rbytes - old.rbytes) / dt, max(0, new.wbytes - old.wbytes) / dt,
                  max(0, new.rios - old.rios) / dt, max(0, new.wios - old.wios) / dt)


def _has_tasks(cgroup_dir: str) -> bool:
    try:
        with open(f"{cgroup_dir}/cgroup.procs", "rb", buffering=0) as f:
            return bool(f.read(16).strip())
    except OSError:
        return False


def polls_spanning(history: Sequence[Poll], span: float) -> tuple[Poll, Poll] | None:
    """The oldest poll at least `span` seconds before the newest (or the oldest kept) and the newest; None
    before two polls."""
    if len(history) < 2:
        return None
    new = history[-1]
    old = history[0]
    for p in reversed(history):
        if p.at <= new.at - span + 1e-3:
            old = p
            break
    return (old, new) if new.at > old.at else None


def stall_percent(history: Sequence[Poll], span: float) -> float | None:
    """The busiest HP cgroup's IO pressure (% of the time some task waited) over the last `span` seconds.

    The guard takes it over `stall_window_s` (0.1 s), shorter than the rates' 0.3 s: over the rates' window
    the time before HP started dilutes its first waits behind a flood (measured: 0.10-0.21 s from HP's first
    IO to the cut, against 0.03-0.06 s over 0.1 s)."""
    window = polls_spanning(history, span)
    if window is None:
        return None
    old, new = window
    shares = [(new.stall_us[rel] - old.stall_us[rel]) / 1e4 / (new.at - old.at)
              for rel in new.stall_us if rel in old.stall_us and new.stall_us[rel] >= old.stall_us[rel]]
    return min(100.0, max(shares)) if shares else None


def limit_of(cap: IoCap) -> IoLimit:
    return IoLimit(*cap.values())


def cap_of(limit: IoLimit) -> IoCap:
    return IoCap(*limit.values())


class IoGuard:
    """One node's disk guard (see the module docstring)."""

    def __init__(self, config: IoConfig, meter: IoMeter, writer: CgroupWriter, be_tier: str,
                 devices: tuple[str, ...], nodeslo: NodeSloBlkio | None = None) -> None:
        self.config = config
        self._meter = meter
        self._writer = writer
        self.be_tier = be_tier
        self.devices = devices
        self._history: deque[Poll] = deque(maxlen=max(4, int(config.window_s / config.poll_s) + 4))
        self._hp_rels: list[str] = []
        self._hp_io_at: dict[str, float] = {}  # disk -> monotonic time HP last did IO on it
        self._started = time.monotonic()
        self._by_workload: dict[str, tuple[float, IoStat]] = {}
        self._cgroups: set[str] = set()  # the workloads' cgroups read at the last tick
        self._spread_at: dict[tuple[str, str], tuple[IoLimit, float]] = {}  # v1: (cgroup, disk) -> set, when
        self._baseline: dict[str, IoCap] = {}
        self._samples = 0
        self._settled = False
        self.stats = GuardStats()
        # The NodeSLO's BE caps by device name (`blkioQOS` device blocks), where it is read, and what of its
        # blkioQOS the agent does not act on.
        self._nodeslo = nodeslo or NodeSloBlkio(dict, list)
        self._resolved: dict[str, str | None] = {}
        self._unresolved: tuple[str, ...] = ()  # device names the NodeSLO gives that are on no disk here

    @classmethod
    def build(cls, config: IoConfig, writer: CgroupWriter, be_tier: str,
              nodeslo: NodeSloBlkio | None = None) -> tuple[IoGuard | None, str]:
        """The guard for this node, or None and why not (no IO controller, no disk to guard)."""
        paths = [config.host_root.rstrip("/") + p for p in config.paths]
        devices = tuple(config.devices) or disks_of(paths)
        if not devices:
            return None, f"no disk to guard: none of {', '.join(paths)} is on a disk (io.paths)"
        try:
            meter = IoMeter(writer.hierarchy, writer.root)
        except CgroupError as err:
            return None, str(err)
        if not meter.exists(be_tier):
            return None, f"the BE tier has no IO cgroup: {meter.dir(be_tier)} does not exist"
        for dev in devices:
            try:
                meter.count_on(dev)
            except OSError as err:  # the guard runs; HP and BE may read as idle on this disk
                log.warning("io: cannot have the kernel count IO on %s per cgroup: %s", dev, err)
        return cls(config, meter, writer, be_tier, devices, nodeslo), ""

    # -- reading -------------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Read the counters now (the root, the BE tier, the busiest HP cgroups' pressure)."""
        now = time.monotonic()
        try:
            root = self._meter.stat("") or {}
            be = self._meter.stat(self.be_tier) or {}
        except CgroupError as err:
            self._failed("read", err)
            return
        hp = {dev: _minus(root.get(dev), be.get(dev)) for dev in self.devices}
        stall = {}
        for rel in self._hp_rels:
            with contextlib.suppress(CgroupError):
                us = self._meter.stall_us(rel)
                if us is not None:
                    stall[rel] = us
        last = self._history[-1] if self._history else None
        if last is not None:
            for dev in self.devices:
                if (hp[dev].rios + hp[dev].wios) > (last.hp[dev].rios + last.hp[dev].wios):
                    self._hp_io_at[dev] = now
        self._history.append(Poll(now, hp, {d: be.get(d, IoStat()) for d in self.devices}, stall))

    def _window(self) -> tuple[Poll, Poll] | None:
        return polls_spanning(self._history, self.config.window_s)

    def _stall_percent(self) -> float | None:
        return stall_percent(self._history, self.config.stall_window_s)

    def _cap_now(self, dev: str) -> IoCap | None:
        try:
            return cap_of(io_max(dev).read(self._writer, self.be_tier))
        except (CgroupError, ValueError):
            return None

    def sample(self, workloads: tuple[Workload, ...]) -> IoSample:
        """The reading a tick's snapshot carries; also notes which HP cgroups' pressure to read."""
        self.poll()
        by_workload = self._workload_rates(workloads)
        self._follow(workloads, by_workload)
        window = self._window()
        now = time.monotonic()
        disks = []
        for dev in self.devices:
            cap = self._cap_now(dev)
            if cap is not None and dev not in self._baseline:
                self._baseline[dev] = self._before_us(dev, cap)
            seen = self._hp_io_at.get(dev)
            idle = None if seen is None else now - seen
            if window is None:
                disks.append(DiskSample(dev, None, None, idle, cap))
                continue
            old, new = window
            dt = new.at - old.at
            hp, be = _rate(new.hp[dev], old.hp[dev], dt), _rate(new.be[dev], old.be[dev], dt)
            disks.append(DiskSample(dev, hp, be, idle, cap))
        stall = self._stall_percent()
        age = now - self._history[-1].at if self._history else 0.0
        self._samples += 1
        static = self._static()
        notes = (*(f"NodeSLO blkioQOS device {n}: no such disk on this node" for n in self._unresolved),
                 *self._nodeslo.unsupported())
        return IoSample(tuple(disks), stall, static, by_workload, age, self.stats.wakes, notes)

    def _static(self) -> dict[str, IoCap]:
        """The caps that hold whatever HP does, by disk: another writer's from before the agent, within the
        NodeSLO's BE device blocks."""
        out = {dev: c for dev, c in self._baseline.items() if not c.none}
        missing = []
        for name, cap in self._nodeslo.caps().items():
            dev = self._device(name)
            if dev is None:
                missing.append(name)
            elif not cap.none:
                out[dev] = cap.within(out.get(dev, NO_CAP))
        self._unresolved = tuple(missing)
        return out

    def _device(self, name: str) -> str | None:
        """The disk a device path names (a partition's disk), as `MAJ:MIN`; None where there is none."""
        if name not in self._resolved:
            try:
                self._resolved[name] = disk_of(os.stat(name).st_rdev)
            except OSError:
                self._resolved[name] = None
        return self._resolved[name]

    def _before_us(self, dev: str, found: IoCap) -> IoCap:
        """The caps another writer set before the agent held the knob: those it gives back, else what it
        finds now (nothing of ours is there yet)."""
        held = self._writer.journal.held.get((f"{IO_MAX}{dev}", self.be_tier))
        if held is None:
            return found
        try:
            return cap_of(io_max(dev).load(held.give_back))
        except (ValueError, TypeError):
            return NO_CAP

    def _workload_rates(self, workloads: tuple[Workload, ...]) -> dict[str, IoRate]:
        """Each workload's IO on the guarded disks since the last tick (from its second sighting)."""
        now = time.monotonic()
        out: dict[str, IoRate] = {}
        seen = {}
        for w in workloads:
            try:
                stat = self._meter.stat(w.cgroup)
            except CgroupError:
                continue
            if stat is None:
                continue
            total = IoStat()
            for dev in self.devices:
                s = stat.get(dev)
                if s is not None:
                    total = IoStat(total.rbytes + s.rbytes, total.wbytes + s.wbytes, total.rios + s.rios,
                                   total.wios + s.wios)
            seen[w.key] = (now, total)
            prev = self._by_workload.get(w.key)
            if prev is not None and now > prev[0]:
                out[w.key] = _rate(total, prev[1], now - prev[0])
        gone = {w.cgroup for w in workloads}
        self._meter.forget(rel for rel in self._cgroups if rel not in gone)
        self._cgroups = gone
        self._by_workload = seen
        return out

    def _follow(self, workloads: Iterable[Workload], rates: Mapping[str, IoRate]) -> None:
        """The HP cgroups whose pressure is read between ticks: the busiest on the disks first."""
        hp = [w for w in workloads if not w.be]
        hp.sort(key=lambda w: -(rates[w.key].iops if w.key in rates else 0.0))
        self._hp_rels = [w.cgroup for w in hp[: self.config.hp_psi_cgroups]]

    # -- waking the loop -----------------------------------------------------------------------------------

    def wanted_tick(self) -> bool:
        """Whether the policy would change a cap now: HP waits for IO on a disk BE is not at its floor on, or
        HP went idle on a disk BE is capped on."""
        window = self._window()
        if window is None:
            return False
        old, new = window
        dt = new.at - old.at
        p = self.config.policy
        stall = self._stall_percent()
        now = time.monotonic()
        for dev in self.devices:
            cap = self.stats.by_dev.get(dev, NO_CAP)
            hp = _rate(new.hp[dev], old.hp[dev], dt)
            active = hp.iops >= p.hp_active_iops
            if active and (stall is None or stall >= p.stall_percent) and cap != p.floor.within(cap):
                return True
            seen = self._hp_io_at.get(dev)
            if not cap.none and (seen is None or now - seen >= p.idle_s):
                return True
        return False

    async def run(self, stop: asyncio.Event, wake: Callable[[], None]) -> None:
        """Poll (at `period()`); `wake` the loop when the policy would act."""
        while not stop.is_set():
            period = self.period()
            if period <= 1.0:  # a plain sleep: half the CPU of wait_for's task and timer (43 against 81 us)
                await asyncio.sleep(period)
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
            if stop.is_set():
                return
            self.poll()
            if self.wanted_tick():
                self.stats.wakes += 1
                wake()

    def period(self) -> float:
        """`poll_s` while BE did more IO than its floor allows on a guarded disk over the last poll (HP may
        start waiting behind it at any moment: the cut is then a stall window and a poll away), else
        `calm_poll_s` (BE at or below its floor would not be cut: nothing to react to fast)."""
        if len(self._history) < 2:
            return self.config.poll_s
        old, new = self._history[-2], self._history[-1]
        dt = new.at - old.at
        if dt <= 0:
            return self.config.poll_s
        floor = self.config.policy.floor.values()
        for dev in self.devices:
            rates = _rate(new.be[dev], old.be[dev], dt)
            if any(c is not None and r > c for c, r in
                   zip(floor, (rates.rbps, rates.wbps, rates.riops, rates.wiops), strict=True)):
                return self.config.poll_s
        return self.config.calm_poll_s

    # -- writing -------------------------------------------------------------------------------------------

    def submit(self, action: SetBeIoLimit, dry_run: bool, record: Recorder) -> ActionRecord | None:
        """Set one disk's caps on the BE tier (on v1 spread below it too); None when they were in place."""
        kind, target = ActionKind.SET_BE_IO_LIMIT, f"{action.dev} {action.cap}"
        # what the policy last asked for, done or not: the wake test compares with it (else a dry run, or a
        # write that fails, would wake the loop at every poll while HP waits)
        self.stats.by_dev[action.dev] = action.cap
        if dry_run:
            return record("io", kind, target, Outcome.DRY_RUN, action.reason, action.numbers)
        try:
            with self._writer.held_by(BE_IO):
                changed = self._writer.set_io_limit(self.be_tier, action.dev, limit_of(action.cap))
                if self._meter.v1:
                    changed = self._spread(action.dev, action.cap) or changed
        except CgroupError as err:
            self._failed(f"set {target}", err)
            return record("io", kind, target, Outcome.FAILED, str(err), action.numbers)
        self.stats.sets += 1
        return record("io", kind, target, Outcome.APPLIED, action.reason, action.numbers) if changed else None

    def follow(self) -> None:
        """At each tick on v1: the caps in force spread again over the cgroups below the tier now."""
        if not self._meter.v1:
            return
        for dev, cap in self.stats.by_dev.items():
            if cap.none:
                continue
            try:
                with self._writer.held_by(BE_IO):
                    self._spread(dev, cap)
            except CgroupError as err:
                self._failed(f"spread {dev}", err)

    def _below(self) -> list[tuple[str, bool]]:
        """Every cgroup below the BE tier in blkio (v1), parents first, and whether it holds a process.
        Read only (a write goes through the writer's checked paths): a plain walk of the tier's directory."""
        top = self._writer.path("blkio", self.be_tier)
        out: list[tuple[str, bool]] = []
        todo = [""]
        while todo:
            sub = todo.pop(0)
            try:
                with os.scandir(f"{top}/{sub}" if sub else top) as it:
                    names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            except OSError:
                continue  # gone meanwhile
            for name in names:
                rel = f"{sub}/{name}" if sub else name
                out.append((f"{self.be_tier}/{rel}", _has_tasks(f"{top}/{rel}")))
                todo.append(rel)
        return out

    def _spread(self, dev: str, cap: IoCap) -> bool:
        """v1: each leaf below the tier with a process an equal share of `cap`, every other cgroup the whole
        of it; a lifted cap puts back what each had before the agent. Whether a file changed."""
        listed = self._below()
        below = [rel for rel, _ in listed]
        parents = {rel.rsplit("/", 1)[0] for rel in below}
        busy = [rel for rel, tasks in listed if tasks and rel not in parents]
        share = cap.scaled(1 / max(1, len(busy)))
        changed = False
        for rel in below:
            want = cap if cap.none or rel in parents else share
            if want.none:
                held = self._writer.journal.held.get((f"{IO_MAX}{dev}", rel))
                if held is None:
                    continue  # nothing of ours there
                limit = io_max(dev).load(held.give_back)
            else:
                limit = limit_of(want)
            key, now = (rel, dev), time.monotonic()
            last = self._spread_at.get(key)
            if last is not None and last[0] == limit and now - last[1] < RECHECK_S:
                continue  # set a moment ago: read back (and re-asserted) once every RECHECK_S
            with contextlib.suppress(CgroupError):  # gone meanwhile: a container that ended
                changed = self._writer.set_io_limit(rel, dev, limit) or changed
                self._spread_at[key] = (limit, now)
        kept = set(below)
        for key in [k for k in self._spread_at if k[0] not in kept]:
            del self._spread_at[key]
        return changed

    def settle_left(self) -> int:
        """Once the policy had rates: give back what an earlier run held and this run does not."""
        if self._settled or self._samples < SETTLE_AFTER_SAMPLES:
            return 0
        self._settled = True
        return self._writer.settle(BE_IO)

    def release(self) -> bool:
        """At a clean exit: put back on each disk what was there before the agent; False if a write failed."""
        ok = True
        held = sorted(self._writer.journal.held.items(), key=lambda kv: -kv[0][1].count("/"))
        for (knob, rel), h in held:
            if h.holder != BE_IO.name or not knob.startswith(IO_MAX):
                continue
            dev = knob.removeprefix(IO_MAX)
            try:
                with self._writer.held_by(BE_IO):
                    self._writer.set_io_limit(rel, dev, io_max(dev).load(h.give_back))
            except CgroupGone:
                continue  # the cgroup went: nothing to give back
            except (CgroupError, ValueError) as err:
                self._failed(f"give back {dev}", err)
                ok = False
        if ok:
            self._writer.release(BE_IO)
        return ok

    def close(self) -> None:
        self._meter.close()

    def _failed(self, what: str, err: Exception) -> None:
        self.stats.errors += 1
        self.stats.last_error = f"{what}: {err}"
        log.warning("io: %s failed: %s", what, err)
