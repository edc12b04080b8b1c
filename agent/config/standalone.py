"""Config of standalone mode (`standalone:`): workloads from the cgroup tree, no cluster sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.config.load import ConfigError, parse_bytes

__all__ = ["LocalWorkload", "StandaloneConfig"]


@dataclass(frozen=True)
class LocalWorkload:
    """Config of one local workload: its cgroup (relative to the root), priority and requests."""

    cgroup: str
    priority: int | None = None
    milli_cpu: int = 0
    memory: int | str = 0

    def __post_init__(self) -> None:
        if self.cgroup.startswith("/") or ".." in Path(self.cgroup).parts:
            raise ConfigError(f"cgroup: must be relative without '..', got {self.cgroup!r}")
        if self.priority is not None and not 0 <= self.priority <= 1_000_000_000:
            raise ConfigError(f"priority: out of range: {self.priority}")
        if not 0 <= self.milli_cpu <= 4_096_000:
            raise ConfigError(f"milli_cpu: out of range: {self.milli_cpu}")
        if not 0 <= parse_bytes(self.memory, "memory") <= 1 << 50:
            raise ConfigError(f"memory: out of range: {self.memory!r}")


@dataclass(frozen=True)
class StandaloneConfig:
    enabled: bool = True
    be_priority: int = 3000
    hp_priority: int = 9000
    workloads: tuple[LocalWorkload, ...] = field(default_factory=tuple)
