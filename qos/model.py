"""The immutable picture of one node at one tick: what every policy reads.

Sources build it, policies read it, nothing mutates it. Units are base units throughout:
CPU in milli-cores (1000 = one core), memory in bytes, times in seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Tier(enum.Enum):
    """Kubernetes QoS tier a workload's cgroup sits in."""

    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


class Source(enum.Enum):
    """Who placed the workload on the node."""

    K8S = "k8s"
    YARN = "yarn"
    LOCAL = "local"


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of CPU and memory; also used for requests and capacity."""

    milli_cpu: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.milli_cpu + other.milli_cpu, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.milli_cpu - other.milli_cpu, self.memory_bytes - other.memory_bytes)

    def fits_in(self, other: Resources) -> bool:
        return self.milli_cpu <= other.milli_cpu and self.memory_bytes <= other.memory_bytes


@dataclass(frozen=True, slots=True)
class Usage:
    """Measured usage over the last sampling window; None where the metric is missing."""

    milli_cpu: float | None = None
    memory_working_set_bytes: int | None = None
    cpu_throttled_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """One pod, YARN container or local cgroup on the node.

    `key` is stable across ticks and restarts: `k8s/<pod uid>`, `yarn/<container id>` or `local/<cgroup>`.
    `cgroup` is relative to the agent's cgroup root. `started_at` is wall-clock seconds (newest-first
    ordering); `sample_age_s` is how old the usage figures are. A `protected` workload (see
    `qos.protection`) is never BE and never a victim, whatever its QoS class.
    """

    key: str
    name: str
    source: Source
    tier: Tier
    be: bool
    priority: int
    cgroup: str
    requests: Resources = Resources()
    usage: Usage = Usage()
    sample_age_s: float = 0.0
    started_at: float = 0.0
    namespace: str = ""
    app_id: str | None = None
    container_seq: int | None = None
    terminating: bool = False
    pids: int = 0
    protected: bool = False  # the node needs it: never BE, suppressed, evicted, killed or drained

    @property
    def is_yarn_am(self) -> bool:
        """YARN's ApplicationMaster is container sequence 1 of its application attempt."""
        return self.source is Source.YARN and self.container_seq == 1


@dataclass(frozen=True, slots=True)
class BeTierState:
    """What the BE tier's knobs are set to right now (read back from the cgroup files)."""

    cpuset: tuple[int, ...] = ()
    quota_milli_cpu: int | None = None
    cpu_idle: bool | None = None
    memory_high_bytes: int | None = None
    missing: str = ""  # why there is no BE tier to act on ("" when there is): the agent is not ready


@dataclass(frozen=True, slots=True)
class DrainTerms:
    """What a drain was asked for. `deadline` is absolute wall-clock seconds; None waits forever."""

    graceful: bool = True
    wait_for_apps: bool = False
    started_at: float = 0.0
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class DrainView:
    """A drain in progress, as the ledger tells it at this tick (absent when the node is not draining).

    `pending`: keys admitted but not launched yet; `finished`: BE keys that ended though their record is
    still there (a cgroup with no process); `apps_seen`: applications that had an allocation here since the
    drain started; `apps_active`: applications not finished; `now`: the ledger's wall clock."""

    terms: DrainTerms
    now: float
    pending: tuple[str, ...] = ()
    finished: frozenset[str] = frozenset()
    apps_seen: frozenset[str] = frozenset()
    apps_active: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class NetworkSample:
    """The node's egress as the shaper read it back (bits/s over the last window, `qos.network`).

    `link_bps` is the configured link capacity; `hp_bps` and `be_bps` the HTB classes' measured rates (None
    until two readings exist); `be_ceil_bps` / `be_rate_bps` the BE class as the kernel holds it (None while
    the tree is not ours: a foreign root qdisc, or not built yet). `be_addresses` are the source addresses of
    the BE workloads that should be classified BE; `classified` those the kernel's filters match now.
    `age_s` is how old the reading is; `ceiling_changes` counts the ceilings the shaper has applied."""

    link_bps: int
    hp_bps: float | None = None
    be_bps: float | None = None
    be_ceil_bps: int | None = None
    be_rate_bps: int | None = None
    owned: bool = False
    root: str = ""
    be_addresses: frozenset[str] = frozenset()
    classified: frozenset[str] = frozenset()
    age_s: float = 0.0
    ceiling_changes: int = 0


@dataclass(frozen=True, slots=True)
class IoCap:
    """Caps on one disk, per second (None: no cap): bytes read, bytes written, IOs read, IOs written."""

    rbps: int | None = None
    wbps: int | None = None
    riops: int | None = None
    wiops: int | None = None

    def __post_init__(self) -> None:
        for key, v in zip(("rbps", "wbps", "riops", "wiops"), self.values(), strict=True):
            if v is not None and (type(v) is not int or v <= 0):
                raise ValueError(f"disk cap {key}: must be an integer > 0 or none, got {v!r}")

    def values(self) -> tuple[int | None, int | None, int | None, int | None]:
        return self.rbps, self.wbps, self.riops, self.wiops

    @property
    def none(self) -> bool:
        """No cap at all."""
        return self.values() == (None, None, None, None)

    def within(self, other: IoCap) -> IoCap:
        """Each cap the tighter of the two (None is no cap)."""
        return IoCap(*(b if a is None else a if b is None else min(a, b)
                       for a, b in zip(self.values(), other.values(), strict=True)))

    def scaled(self, factor: float) -> IoCap:
        return IoCap(*(None if v is None else max(1, int(v * factor)) for v in self.values()))

    def __str__(self) -> str:
        if self.none:
            return "none"
        return " ".join(f"{k}={v}" for k, v in zip(("rbps", "wbps", "riops", "wiops"), self.values(),
                                                   strict=True) if v is not None)


NO_CAP = IoCap()


@dataclass(frozen=True, slots=True)
class IoRate:
    """Bytes and IOs a second, read and written, over a window."""

    rbps: float = 0.0
    wbps: float = 0.0
    riops: float = 0.0
    wiops: float = 0.0

    @property
    def bps(self) -> float:
        return self.rbps + self.wbps

    @property
    def iops(self) -> float:
        return self.riops + self.wiops


@dataclass(frozen=True, slots=True)
class DiskSample:
    """One guarded disk (`MAJ:MIN`) as the IO guard read it (rates over its last window).

    `hp` is what the HP workloads did on it (the cgroup root less the BE tier), `be` the BE tier (YARN's
    containers included); None until two readings exist. `hp_idle_s`: seconds since HP last did IO on it
    (None: not since the guard started). `cap`: BE's caps on it as the kernel holds them (None: unread)."""

    dev: str
    hp: IoRate | None = None
    be: IoRate | None = None
    hp_idle_s: float | None = None
    cap: IoCap | None = None


@dataclass(frozen=True, slots=True)
class IoSample:
    """The disks the agent guards for HP (`qos.io`).

    `hp_stall_percent`: the worst HP cgroup's IO pressure (`io.pressure` some, percent of the window), None
    where the kernel gives none for them. `static`: caps that hold on BE whatever HP does (a NodeSLO
    `blkioQOS` device block), by disk. `by_workload`: each workload's IO over the last tick, by key.
    `age_s`: how old the reading is. `wakeups`: ticks the guard woke since start; `notes`: what of the
    configuration it does not act on, in plain words (a NodeSLO block, a device not on this node)."""

    disks: tuple[DiskSample, ...] = ()
    hp_stall_percent: float | None = None
    static: Mapping[str, IoCap] = field(default_factory=dict)
    by_workload: Mapping[str, IoRate] = field(default_factory=dict)
    age_s: float = 0.0
    wakeups: int = 0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One consistent reading of the node.

    `node_usage` is the whole machine (or the configured private node), `hp_usage` the sum of HP
    workloads, `be_usage` the BE tier, `system_usage` what is neither (daemons, kernel).
    `stale` maps a source name to a reason; any entry forbids eviction this tick.
    `hp_cpu_pressure_some_avg10` is CPU PSI `some` of the HP workloads (percent, the worst of them) over
    the last collection window, where the kernel has it; the collector derives it from the cumulative
    stall counter, because the kernel's own avg10 moves only every 2 s.
    `origin_annotation` is the node's batch origin annotation text as read (None: not read, or absent), and
    `third_party_annotation` its `node.koordinator.sh/thirdPartyAllocations` likewise;
    `drain` the drain in progress. The daemon fills them from the API server and the ledger.
    `usage_report_age_s`: seconds since our last successful usage report (Koordinator NodeMetric) to the
    API server; None when none was written (or reporting is off).
    `network`: the egress shaper's last reading (None when network control is off); `io` the IO guard's
    (None when it is off).
    """

    taken_at: float
    capacity: Resources
    cpus: tuple[int, ...]
    node_usage: Usage
    hp_usage: Usage
    be_usage: Usage
    system_usage: Usage
    workloads: tuple[Workload, ...]
    be_tier: BeTierState = BeTierState()
    hp_cpu_pressure_some_avg10: float | None = None
    stale: Mapping[str, str] = field(default_factory=dict)
    interval_s: float = 1.0
    origin_annotation: str | None = None
    third_party_annotation: str | None = None
    drain: DrainView | None = None
    usage_report_age_s: float | None = None
    network: NetworkSample | None = None
    io: IoSample | None = None

    @property
    def be_workloads(self) -> tuple[Workload, ...]:
        return tuple(w for w in self.workloads if w.be)

    @property
    def hp_workloads(self) -> tuple[Workload, ...]:
        return tuple(w for w in self.workloads if not w.be)

    def workload(self, key: str) -> Workload | None:
        for w in self.workloads:
            if w.key == key:
                return w
        return None
