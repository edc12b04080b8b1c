"""The agent's configuration: one YAML file, every field validated, errors name the field."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from agent.config.api import ApiConfig
from agent.config.load import ConfigError, from_mapping, parse_bytes
from agent.config.metrics import MetricsConfig
from agent.config.sources import (
    KubeApiConfig,
    KubeletConfig,
    NodeManagerConfig,
    ReportingConfig,
    SourcesConfig,
)
from agent.config.standalone import StandaloneConfig
from cgroups.errors import PathOutsideRoot
from cgroups.paths import check_rel
from qos.batch import BatchConfig
from qos.policies import PolicyConfig
from qos.protection import ProtectionConfig

__all__ = ["AgentConfig", "ConfigError", "load_config"]


@dataclass(frozen=True)
class NodeConfig:
    """The node the agent manages. Capacity defaults to the machine's.

    `scope: cgroup-root` measures node usage as the usage of the agent's cgroup root, so that a private
    root (tests, the demo) behaves as a small node of its own on a shared machine.
    """

    name: str = ""
    cpus: float | None = None
    memory: int | str | None = None
    scope: Literal["machine", "cgroup-root"] = "machine"

    def __post_init__(self) -> None:
        if self.cpus is not None and not 0 < self.cpus <= 4096:
            raise ConfigError(f"node.cpus: must be in (0, 4096], got {self.cpus}")
        if self.memory is not None and self.memory_bytes is not None and self.memory_bytes <= 0:
            raise ConfigError(f"node.memory: must be positive, got {self.memory!r}")

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else parse_bytes(self.memory, "node.memory")

    @property
    def node_name(self) -> str:
        return self.name or os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class CgroupConfig:
    """Where the agent's cgroups are: `root` is relative to each hierarchy's mount (no leading slash)."""

    mount: str = "/sys/fs/cgroup"
    root: str = "kubepods"
    driver: Literal["auto", "cgroupfs", "systemd"] = "auto"
    yarn_hierarchy: str = "hadoop-yarn"
    setup_tiers: bool = False
    cleanup_on_exit: bool = False

    def __post_init__(self) -> None:
        try:
            ok = bool(check_rel(self.root.rstrip("/"), "cgroups.root"))
        except PathOutsideRoot:
            ok = False
        if not ok:
            raise ConfigError(f"cgroups.root: must be a relative path without '.' or '..', got {self.root!r}")
        if "/" in self.yarn_hierarchy or self.yarn_hierarchy in ("", ".", ".."):
            raise ConfigError(
                f"cgroups.yarn_hierarchy: must be one directory name, got {self.yarn_hierarchy!r}")


@dataclass(frozen=True)
class LoopConfig:
    interval_s: float = 1.0
    fast_path: bool = True
    fast_poll_s: float = 0.05
    fast_hp_jump_milli_cpu: int = 200
    fast_psi_stall_ratio: float = 0.05

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval_s <= 60:
            raise ConfigError(f"loop.interval_s: must be in [0.05, 60], got {self.interval_s}")
        if not 0.005 <= self.fast_poll_s <= self.interval_s:
            raise ConfigError(f"loop.fast_poll_s: must be in [0.005, interval_s], got {self.fast_poll_s}")
        if not 0 < self.fast_psi_stall_ratio <= 1:
            raise ConfigError("loop.fast_psi_stall_ratio: must be in (0, 1]")
        if not 0 < self.fast_hp_jump_milli_cpu <= 1_000_000:
            raise ConfigError(
                f"loop.fast_hp_jump_milli_cpu: must be in (0, 1000000], got {self.fast_hp_jump_milli_cpu}")


@dataclass(frozen=True)
class EvictionConfig:
    """How evictions are carried out: rate limit (token bucket), grace period, dry run."""

    dry_run: bool = False
    rate_per_minute: float = 10.0
    burst: int = 3
    grace_period_s: float = 5.0
    recheck_cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.rate_per_minute <= 100_000:
            raise ConfigError(f"eviction.rate_per_minute: must be in (0, 100000], got {self.rate_per_minute}")
        if not 0 <= self.recheck_cooldown_s <= 86_400:
            raise ConfigError(
                f"eviction.recheck_cooldown_s: must be in [0, 86400], got {self.recheck_cooldown_s}")
        if self.burst < 1:
            raise ConfigError("eviction.burst: must be ≥ 1")
        if not 0 <= self.grace_period_s <= 600:
            raise ConfigError("eviction.grace_period_s: must be in [0, 600]")


@dataclass(frozen=True)
class StateConfig:
    """The node's allocation ledger. `path` "" keeps no state on disk (tests and tools only).

    `await_scheduler_ack`: whether a new incarnation waits RECOVERING for a central scheduler's AckRecovery
    before it admits batch work. "auto" waits when a cluster source (kubelet or YARN) is configured and
    starts SCHEDULABLE in standalone mode; true/false force it (true: a scheduler drives a standalone node
    over the API)."""

    path: str = "/var/lib/coloc-agent/state.json"
    ring_size: int = 4096
    watch_queue_size: int = 1024
    pending_launch_ttl_s: float = 300.0
    await_scheduler_ack: bool | str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.await_scheduler_ack, bool) and self.await_scheduler_ack != "auto":
            raise ConfigError(f"state.await_scheduler_ack: must be true, false or \"auto\", "
                              f"got {self.await_scheduler_ack!r}")
        if self.path and not os.path.isabs(self.path):
            raise ConfigError(f"state.path: must be absolute, got {self.path!r}")
        if self.ring_size < 16:
            raise ConfigError(f"state.ring_size: must be ≥ 16, got {self.ring_size}")
        if self.watch_queue_size < 16:
            raise ConfigError(f"state.watch_queue_size: must be ≥ 16, got {self.watch_queue_size}")
        if self.pending_launch_ttl_s <= 0:
            raise ConfigError("state.pending_launch_ttl_s: must be > 0")

    def awaits_ack(self, cluster_sources: bool) -> bool:
        """The resolved switch: "auto" waits exactly when a cluster source is configured."""
        if isinstance(self.await_scheduler_ack, bool):
            return self.await_scheduler_ack
        return cluster_sources


@dataclass(frozen=True)
class DrainConfig:
    """`cordon`: mark the Kubernetes Node unschedulable while decommissioning (needs sources.kube_api)."""

    cordon: bool = False


@dataclass(frozen=True)
class AuditConfig:
    """Where audit records go: a JSON-lines file, or "" for the log only."""

    path: str = ""


@dataclass(frozen=True)
class LogConfig:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "text"] = "auto"


@dataclass(frozen=True)
class AgentConfig:
    node: NodeConfig = field(default_factory=NodeConfig)
    cgroups: CgroupConfig = field(default_factory=CgroupConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    log: LogConfig = field(default_factory=LogConfig)
    standalone: StandaloneConfig = field(default_factory=StandaloneConfig)
    policies: PolicyConfig = field(default_factory=PolicyConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    state: StateConfig = field(default_factory=StateConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    batch: BatchConfig = field(default_factory=lambda: BatchConfig(origin="local"))
    protection: ProtectionConfig = field(default_factory=ProtectionConfig)
    sources: SourcesConfig = field(default_factory=lambda: SourcesConfig(
        kubelet=KubeletConfig(enabled=False), yarn=NodeManagerConfig(enabled=False),
        kube_api=KubeApiConfig(enabled=False), reporting=ReportingConfig(mode="off")))

    def __post_init__(self) -> None:
        if self.drain.cordon and not self.sources.kube_api.enabled:
            raise ConfigError("drain.cordon: needs the Kubernetes API (a sources.kube_api section)")


_OFF = {"kubelet": {"enabled": False}, "yarn": {"enabled": False}, "kube_api": {"enabled": False},
        "reporting": {"mode": "off"}}


def with_source_defaults(data: object) -> object:
    """A source is on when its section is in the file and off when it is not: naming only `sources.yarn`
    must not quietly turn on the kubelet, the API client and annotation reporting too."""
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        return data
    sources = dict(data["sources"])
    for name, off in _OFF.items():
        section = sources.get(name)
        if section is None:
            sources[name] = off
        elif isinstance(section, dict) and name != "reporting" and "enabled" not in section:
            sources[name] = {"enabled": True, **section}
    return {**data, "sources": sources}


def load_config(path: str | Path) -> AgentConfig:
    """Read and validate a YAML config file; raise ConfigError naming the file and the field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config: {err.strerror}") from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    try:
        return from_mapping(AgentConfig, with_source_defaults(data))
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err
