"""BE disk IO, held back while HP needs the disk: the BE tier's caps on each guarded disk, from the IO guard's
reading (`NodeSnapshot.io`).

Per disk, every tick:

- **HP needs the disk**: HP did IO on it in the window (at least `hp_active_iops`) and waits for IO
  (`io.pressure` of its busiest cgroups at or above `stall_percent`; where the kernel has no pressure for
  them, doing IO is taken as needing the disk). BE is cut to the floor at once: `floor_read_mbps` and
  `floor_read_iops` for its reads, `floor_mbps` and `floor_iops` for its writes.
- **HP busy, not waiting**: a cap in force is doubled once every `hold_s` without a stall (BE gets back what
  HP leaves), and lifted once BE does under half of it.
- **HP idle** on the disk for `idle_s`: every cap is lifted. The disk is not held back for HP that does not
  use it (work-conserving).

Caps that hold whatever HP does (`IoSample.static`, a NodeSLO `blkioQOS` device block) bound every cap set
here. A cap the kernel reads back otherwise than asked is set again. A reading older than
`STALE_INTERVALS` loop intervals changes nothing.

Sustained need with BE at the floor for `evict_after_s` ends, when `evict` is on (off by default, as the
other evictions are), in evicting the BE workload that did the most IO over the last tick (never a
protected one, never on stale data); the executor's rate limit and dry run apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from qos import validation
from qos.actions import Action, Evict, EvictReason, Hold, HoldReason, SetBeIoLimit
from qos.failsafe import FailsafeConfig, eviction_blocker
from qos.model import NO_CAP, DiskSample, IoCap, IoSample, NodeSnapshot
from qos.pipeline import Policy

POLICY_NAME = "io"
STALE_INTERVALS = 3.0
MB = 1_000_000


@dataclass(frozen=True, slots=True)
class IoPolicyConfig:
    """The disk guard's policy (docs/io.md): BE's caps on each guarded disk while HP needs it."""

    # BE's write cap, in MB/s, while HP needs the disk
    floor_mbps: float = validation.bounded(10.0, 0.1, 100_000.0)
    # BE's write cap, in IO/s, while HP needs the disk
    floor_iops: int = validation.bounded(400, 1, 10_000_000)
    # BE's read cap, in MB/s, while HP needs the disk (lower than writes': a large read holds the disk for
    # longer than a write it takes into its cache, and HP's IO waits behind it)
    floor_read_mbps: float = validation.bounded(2.0, 0.1, 100_000.0)
    # BE's read cap, in IO/s, while HP needs the disk
    floor_read_iops: int = validation.bounded(400, 1, 10_000_000)
    # HP needs the disk when its IO pressure is at or above this percent
    stall_percent: float = validation.bounded(5.0, 0.0, 100.0)
    # HP counts as using the disk at this many IO/s or more
    hp_active_iops: float = validation.bounded(2.0, 0.0, 1_000_000.0, low_open=True)
    # every cap is lifted once HP has been idle on the disk this long
    idle_s: float = validation.bounded(0.5, 0.0, 3600.0)
    # HP busy but not waiting: a cap in force is doubled once every this many seconds
    hold_s: float = validation.bounded(2.0, 0.0, 3600.0)
    # evict the BE workload doing the most IO when holding BE at the floor is not enough
    evict: bool = False
    # evict once HP has needed the disk this long with BE at the floor
    evict_after_s: float = validation.bounded(30.0, 1.0, 3600.0)

    def __post_init__(self) -> None:
        validation.check_choices(self, "io.policy")
        validation.check_bounds(self, "io.policy")

    @property
    def floor(self) -> IoCap:
        return IoCap(max(1, int(self.floor_read_mbps * MB)), max(1, int(self.floor_mbps * MB)),
                     self.floor_read_iops, self.floor_iops)


@dataclass(frozen=True, slots=True)
class DiskState:
    """What this policy last asked for on one disk, when (snapshot time), and since when HP needs it."""

    cap: IoCap = NO_CAP
    changed_at: float = 0.0
    needed_since: float | None = None
    calm_since: float | None = None


@dataclass(frozen=True, slots=True)
class IoState:
    disks: Mapping[str, DiskState] = field(default_factory=dict)
    evicted_at: float | None = None


def _needs(d: DiskSample, io: IoSample, config: IoPolicyConfig) -> tuple[bool, str]:
    """Whether HP needs this disk now, and the words for it."""
    assert d.hp is not None
    if d.hp.iops < config.hp_active_iops:
        return False, f"HP does {d.hp.iops:.1f} IO/s on {d.dev}"
    stall = io.hp_stall_percent
    if stall is None:
        return True, f"HP does {d.hp.iops:.0f} IO/s on {d.dev} (no IO pressure for HP: IO is need)"
    if stall >= config.stall_percent:
        return True, (f"HP waits for IO {stall:.1f}% of the time (>= {config.stall_percent:g}%) doing "
                      f"{d.hp.iops:.0f} IO/s on {d.dev}")
    return False, f"HP does {d.hp.iops:.0f} IO/s on {d.dev} and waits {stall:.1f}% of the time"


def _raised(cap: IoCap, d: DiskSample) -> IoCap:
    """The cap doubled while BE presses against it; none once BE does under half of it (it holds BE back no
    more)."""
    assert d.be is not None
    rates = (d.be.rbps, d.be.wbps, d.be.riops, d.be.wiops)
    if all(c is None or r < c / 2 for c, r in zip(cap.values(), rates, strict=True)):
        return NO_CAP
    return cap.scaled(2.0)


def _target(d: DiskSample, io: IoSample, config: IoPolicyConfig, st: DiskState,
            now: float) -> tuple[IoCap, str, DiskState]:
    """The cap this disk should carry (before the static caps), why, and the disk's new state."""
    need, why = _needs(d, io, config)
    if need:
        since = st.needed_since if st.needed_since is not None else now
        return config.floor, why, replace(st, needed_since=since, calm_since=None)
    st = replace(st, needed_since=None)
    idle = d.hp_idle_s is None or d.hp_idle_s >= config.idle_s
    if idle:
        shown = "since the agent started" if d.hp_idle_s is None else f"for {d.hp_idle_s:.1f}s"
        return NO_CAP, f"HP did no IO on {d.dev} {shown}", replace(st, calm_since=None)
    if st.cap.none:
        return NO_CAP, why, st
    calm = st.calm_since if st.calm_since is not None else now
    st = replace(st, calm_since=calm)
    if now - max(calm, st.changed_at) >= config.hold_s:
        return _raised(st.cap, d), f"{why}: no stall for {config.hold_s:g}s, BE gets more", st
    return st.cap, why, st


def _numbers(d: DiskSample, io: IoSample, cap: IoCap) -> dict[str, float]:
    assert d.hp is not None and d.be is not None
    out = {"hp_iops": round(d.hp.iops, 1), "hp_bps": round(d.hp.bps), "be_iops": round(d.be.iops, 1),
           "be_bps": round(d.be.bps)}
    if io.hp_stall_percent is not None:
        out["hp_io_stall_percent"] = round(io.hp_stall_percent, 2)
    for key, v in zip(("cap_rbps", "cap_wbps", "cap_riops", "cap_wiops"), cap.values(), strict=True):
        out[key] = -1 if v is None else v
    return out


def _heaviest(snapshot: NodeSnapshot, io: IoSample, pending: frozenset[str]) -> tuple[str, float] | None:
    """The BE workload that did the most IO over the last tick (never protected or on its way out)."""
    best: tuple[str, float] | None = None
    for w in snapshot.be_workloads:
        rate = io.by_workload.get(w.key)
        if w.protected or w.terminating or w.key in pending or rate is None or rate.bps <= 0:
            continue
        if best is None or rate.bps > best[1]:
            best = (w.key, rate.bps)
    return best


def _evictions(snapshot: NodeSnapshot, io: IoSample, config: IoPolicyConfig, state: IoState,
               pending: frozenset[str], failsafe: FailsafeConfig) -> tuple[list[Action], IoState]:
    now = snapshot.taken_at
    floor = config.floor
    long = [dev for dev, st in state.disks.items()
            if st.needed_since is not None and now - st.needed_since >= config.evict_after_s
            and st.cap == floor.within(io.static.get(dev, NO_CAP))]
    if not long or (state.evicted_at is not None and now - state.evicted_at < config.evict_after_s):
        return [], state
    blocker = eviction_blocker(snapshot, failsafe)
    if blocker is not None:
        return [Hold(POLICY_NAME, HoldReason.UNSAFE_DATA,
                     f"would evict the heaviest BE IO user, but {blocker}")], state
    victim = _heaviest(snapshot, io, pending)
    if victim is None:
        return [], state
    msg = (f"HP has needed {', '.join(long)} for {config.evict_after_s:g}s with BE at its IO floor; "
           f"{victim[0]} did the most BE IO ({victim[1] / MB:.1f} MB/s)")
    return ([Evict(victim[0], EvictReason.IO_PRESSURE, msg, numbers={"be_workload_bps": round(victim[1])})],
            replace(state, evicted_at=now))


def decide(snapshot: NodeSnapshot, config: IoPolicyConfig, state: IoState,
           pending: frozenset[str] = frozenset(),
           failsafe: FailsafeConfig | None = None) -> tuple[list[Action], IoState]:
    """This tick's BE IO caps (only those that change or need re-asserting) and the new state."""
    io = snapshot.io
    if io is None:
        return [], state
    if io.age_s > STALE_INTERVALS * snapshot.interval_s:
        return [Hold(POLICY_NAME, HoldReason.STALE_DATA,
                     f"IO reading is {io.age_s:.1f}s old: BE's IO caps kept")], state
    now = snapshot.taken_at
    actions: list[Action] = []
    disks = dict(state.disks)
    for d in io.disks:
        if d.hp is None or d.be is None or d.cap is None:
            actions.append(Hold(POLICY_NAME, HoldReason.MISSING_DATA, f"no IO rates for {d.dev} yet"))
            continue
        st = disks.get(d.dev, DiskState())
        cap, why, st = _target(d, io, config, st, now)
        cap = cap.within(io.static.get(d.dev, NO_CAP))
        if cap != st.cap:
            actions.append(SetBeIoLimit(d.dev, cap, why, _numbers(d, io, cap)))
            st = replace(st, cap=cap, changed_at=now)
        elif d.cap != cap:
            actions.append(SetBeIoLimit(d.dev, cap, f"re-assert: BE's caps on {d.dev} read back as {d.cap}",
                                        _numbers(d, io, cap)))
        disks[d.dev] = st
    state = replace(state, disks=disks)
    if config.evict:
        more, state = _evictions(snapshot, io, config, state, pending, failsafe or FailsafeConfig())
        actions.extend(more)
    return actions, state


@dataclass(frozen=True, slots=True)
class IoPolicy(Policy[IoState]):
    """BE disk IO behind the pipeline protocol; it acts only on the IO guard's reading."""

    config: IoPolicyConfig = field(default_factory=IoPolicyConfig)
    failsafe: FailsafeConfig = field(default_factory=FailsafeConfig)
    name: str = POLICY_NAME

    def initial_state(self) -> IoState:
        return IoState()

    def decide(self, snapshot: NodeSnapshot, state: IoState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], IoState]:
        return decide(snapshot, self.config, state, pending, self.failsafe)
