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


@dataclass(frozen=True, slots=True)
class Hold:
    """A policy wanted to act but did not (stale data, cool-down, rate limit); made visible on purpose."""

    policy: str
    reason: str


Action = (SetBeCpuset | SetBeCpuQuota | SetBeCpuIdle | SetBeEgressCeiling | SetBeEgressSources | SetBeIoLimit
          | Evict | Hold)
