"""Config of standalone mode (`standalone:`): workloads from the cgroup tree, no cluster sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.config.load import ConfigError, parse_bytes
from qos.validation import bounded, check_bounds, check_choices

MAX_PRIORITY = 1_000_000_000

__all__ = ["LocalWorkload", "StandaloneConfig"]


@dataclass(frozen=True)
class LocalWorkload:
    """Config of one local workload: its cgroup (relative to the root), priority and requests."""

    cgroup: str  # the workload's cgroup, relative to cgroups.root (e.g. besteffort/job-1)
    # its priority (evictions take the lowest first); null: be_priority or hp_priority by tier
    priority: int | None = bounded(None, 0, MAX_PRIORITY)
    milli_cpu: int = bounded(0, 0, 4_096_000)  # its CPU request, in milli-CPU
    memory: int | str = 0  # its memory request (bytes or a quantity like 512Mi)

    def __post_init__(self) -> None:
        if self.cgroup.startswith("/") or ".." in Path(self.cgroup).parts:
            raise ConfigError(f"cgroup: must be relative without '..', got {self.cgroup!r}")
        check_bounds(self, "", ConfigError)
        if not 0 <= parse_bytes(self.memory, "memory") <= 1 << 50:
            raise ConfigError(f"memory: out of range: {self.memory!r}")


@dataclass(frozen=True)
class StandaloneConfig:
    """Workloads from the cgroup tree under `cgroups.root`: children of `besteffort` are BE, YARN's containers
    below it are YARN BE, everything else is HP."""

    enabled: bool = True  # take workloads from the cgroup tree under cgroups.root
    be_priority: int = bounded(3000, 0, MAX_PRIORITY)  # priority of a BE workload not listed in workloads
    hp_priority: int = bounded(9000, 0, MAX_PRIORITY)  # priority of an HP workload not listed in workloads
    # per-cgroup priority and requests, where the defaults do not fit
    workloads: tuple[LocalWorkload, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_choices(self, "standalone", ConfigError)
        check_bounds(self, "standalone", ConfigError)
