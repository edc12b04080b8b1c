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

    cgroup: str
    priority: int | None = bounded(None, 0, MAX_PRIORITY)
    milli_cpu: int = bounded(0, 0, 4_096_000)
    memory: int | str = 0

    def __post_init__(self) -> None:
        if self.cgroup.startswith("/") or ".." in Path(self.cgroup).parts:
            raise ConfigError(f"cgroup: must be relative without '..', got {self.cgroup!r}")
        check_bounds(self, "", ConfigError)
        if not 0 <= parse_bytes(self.memory, "memory") <= 1 << 50:
            raise ConfigError(f"memory: out of range: {self.memory!r}")


@dataclass(frozen=True)
class StandaloneConfig:
    enabled: bool = True
    be_priority: int = bounded(3000, 0, MAX_PRIORITY)
    hp_priority: int = bounded(9000, 0, MAX_PRIORITY)
    workloads: tuple[LocalWorkload, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_choices(self, "standalone", ConfigError)
        check_bounds(self, "standalone", ConfigError)
