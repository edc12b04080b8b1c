"""Actions: what a policy wants done, as plain data. Executors carry them out; policies never do I/O."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from qos.model import IoCap


class ActionKind(enum.StrEnum):
    """What an executed action did, as records, logs and metrics name it."""

    SET_BE_CPUSET = "set_be_cpuset"
    SET_BE_CPU_QUOTA = "set_be_cpu_quota"
    SET_BE_CPU_IDLE = "set_be_cpu_idle"
    BE_KNOB_MEMBERS = "be_knob_members"
    RELEASE_BE_LEFT = "release_be_left"  # suppression an earlier, killed run left, released (executor only)
    EVICT = "evict"
    SET_BE_EGRESS_CEILING = "set_be_egress_ceiling"
    SET_BE_EGRESS_SOURCES = "set_be_egress_sources"
    SET_BE_IO_LIMIT = "set_be_io_limit"


class EvictReason(enum.Enum):
    CPU_SATISFACTION = "cpu_satisfaction"
    MEMORY_PRESSURE = "memory_pressure"
    BATCH_OVERCOMMIT = "batch_overcommit"
    DRAIN_TIMEOUT = "drain_timeout"
    IO_PRESSURE = "io_pressure"


@dataclass(frozen=True, slots=True)
class SetBeCpuset:
    """Confine the BE tier to these CPUs."""

    cpus: tuple[int, ...]
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetBeCpuQuota:
    """Cap the BE tier at this many milli-cores; None lifts the cap."""

    milli_cpu: int | None
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetBeCpuIdle:
    """Put the BE tier in the SCHED_IDLE class (`cpu.idle`)."""

    idle: bool
    reason: str


@dataclass(frozen=True, slots=True)
class SetBeEgressCeiling:
    """Set the BE egress class to `rate_bps` guaranteed and at most `ceil_bps` (bits/s), in place."""

    ceil_bps: int
    rate_bps: int
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetBeEgressSources:
    """Classify egress from exactly these source addresses (BE pods' IPs) into the BE class."""

    addresses: frozenset[str]
    reason: str


@dataclass(frozen=True, slots=True)
class SetBeIoLimit:
    """Cap the BE tier's IO on one disk (`MAJ:MIN`) at `cap` (`NO_CAP` lifts every cap)."""

    dev: str
    cap: IoCap
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evict:
    """Evict one workload. `release` is what the policy expects to get back from it."""

    key: str
    reason: EvictReason
    message: str
    release_milli_cpu: int = 0
    release_memory_bytes: int = 0
    numbers: Mapping[str, float] = field(default_factory=dict)


class HoldReason(enum.StrEnum):
    """Why a policy (or the executor, for an eviction it refused) held back: one code per kind of hold, the
    only value `coloc_holds_total{reason}` takes, so the label's values are a fixed set. The numbers behind a
    hold (a pressure, a wait, a target) are in its free text, which goes to the log and the audit."""

    # data a decision needs is missing, too old or unsafe to act on
    MISSING_DATA = "missing_data"
    STALE_DATA = "stale_data"
    UNSAFE_DATA = "unsafe_data"
    # suppression
    HP_CPU_PRESSURE = "hp_cpu_pressure"  # not growing BE: HP's CPU pressure is high
    NO_CPUS = "no_cpus"  # the snapshot lists no CPUs: no cpuset to give BE
    CPU_IDLE_ON_KUBELET_TIER = "cpu_idle_on_kubelet_tier"  # executor: cpu.idle refused (docs/coexistence.md)
    # evictions (the policies')
    COOLDOWN = "cooldown"
    NO_VICTIM = "no_victim"
    VICTIMS_TERMINATING = "victims_terminating"  # victims still terminating will release enough
    # batch overcommit
    ORIGIN_UNUSABLE = "origin_unusable"
    ORIGIN_HELD = "origin_held"
    ORIGIN_UNKNOWN = "origin_unknown"
    OTHERS_UNUSABLE = "others_unusable"
    SUSTAIN = "sustain"  # overcommitted, releasing after local_sustain_s
    EVICTION_DISABLED = "eviction_disabled"
    PENDING_RELEASES = "pending_releases"
    NOT_ENOUGH_VICTIMS = "not_enough_victims"
    ADMISSIONS_REFUSED = "admissions_refused"
    # network
    QDISC_NOT_OURS = "qdisc_not_ours"
    HOLD_TIME = "hold_time"  # raising the egress ceiling waits for hold_s
    # evictions the executor refused (agent/executors/apply.py)
    PROTECTED = "protected"
    WORKLOAD_GONE = "workload_gone"
    NOT_BEST_EFFORT = "not_best_effort"
    ALREADY_TERMINATING = "already_terminating"
    RATE_LIMITED = "rate_limited"
    NO_EVICTOR = "no_evictor"


@dataclass(frozen=True, slots=True)
class Hold:
    """A policy wanted to act but did not (stale data, cool-down, rate limit); made visible on purpose.
    `code` is the kind of hold (a label value); `reason` says it in words, with its numbers (log, audit)."""

    policy: str
    code: HoldReason
    reason: str


Action = (SetBeCpuset | SetBeCpuQuota | SetBeCpuIdle | SetBeEgressCeiling | SetBeEgressSources | SetBeIoLimit
          | Evict | Hold)
