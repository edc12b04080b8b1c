"""The agent's configuration: one YAML file, every field validated, errors name the field."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.config.api import ApiConfig
from agent.config.batch_limits import BatchLimitsConfig
from agent.config.io import IoConfig
from agent.config.load import MAX_CONFIG_BYTES, ConfigError, from_mapping, parse_bytes, parse_yaml
from agent.config.metrics import MetricsConfig
from agent.config.network import NetworkConfig
from agent.config.provenance import file_keys
from agent.config.resource_qos import ResourceQosConfig
from agent.config.sources import (
    KubeApiConfig,
    KubeletConfig,
    NodeManagerConfig,
    ReportingConfig,
    SourcesConfig,
)
from agent.config.standalone import StandaloneConfig
from agent.config.trace import TraceConfig
from cgroups.errors import PathOutsideRoot
from cgroups.paths import check_rel
from qos.batch import BatchConfig
from qos.policies import PolicyConfig
from qos.protection import ProtectionConfig
from qos.validation import bounded, check_bounds, check_choices, short

__all__ = ["AgentConfig", "ConfigError", "LoadedConfig", "load_config", "read_config"]

MAX_MEMORY = 16 << 50  # 16 PiB: above any node, far below int64 (the API's field)


@dataclass(frozen=True)
class NodeConfig:
    """The node the agent manages. Capacity defaults to the machine's.

    `scope: cgroup-root` measures node usage as the usage of the agent's cgroup root, so that a private
    root (tests, the demo) behaves as a small node of its own on a shared machine.
    """

    name: str = ""  # the node's name; "" takes $NODE_NAME, else the host name
    # node CPU capacity; null: the machine's CPUs
    cpus: float | None = bounded(None, 0.0, 4096.0, low_open=True)
    memory: int | str | None = None  # node memory capacity (bytes or 4Gi); null: the machine's
    # node usage from the whole machine, or from the agent's cgroup root alone
    scope: Literal["machine", "cgroup-root"] = "machine"

    def __post_init__(self) -> None:
        check_choices(self, "node", ConfigError)
        check_bounds(self, "node", ConfigError)
        mem = self.memory_bytes
        if mem is not None and not 0 < mem <= MAX_MEMORY:
            raise ConfigError(f"node.memory: must be in (0, 16Pi], got {short(self.memory)}")

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else parse_bytes(self.memory, "node.memory")

    @property
    def node_name(self) -> str:
        return self.name or os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class CgroupConfig:
    """Where the agent's cgroups are: `root` is relative to each hierarchy's mount (no leading slash)."""

    mount: str = "/sys/fs/cgroup"  # where the cgroup hierarchies are mounted
    root: str = "kubepods"
    # the kubelet's cgroup driver; auto: detected on the node
    driver: Literal["auto", "cgroupfs", "systemd"] = "auto"
    # YARN's directory under the BE tier (yarn.nodemanager.linux-container-executor.cgroups.hierarchy)
    yarn_hierarchy: str = "hadoop-yarn"
    # make the root and its tiers when absent (standalone, demo, tests); off on a kubelet's node
    setup_tiers: bool = False
    cleanup_on_exit: bool = False  # remove the tiers this run made when it exits
    # How to reach systemd when the kubelet uses its driver (knobs of a unit are set through systemd so that
    # it keeps them): "auto" (systemd's private socket, then the system bus), "off", or a socket path.
    systemd_bus: str = "auto"

    def __post_init__(self) -> None:
        check_choices(self, "cgroups", ConfigError)
        if self.systemd_bus not in ("auto", "off") and not self.systemd_bus.startswith("/"):
            raise ConfigError(f"cgroups.systemd_bus: must be auto, off or an absolute socket path, "
                              f"got {self.systemd_bus!r}")
        try:
            ok = bool(check_rel(self.root.rstrip("/"), "cgroups.root"))
        except PathOutsideRoot:
            ok = False
        if not ok:
            raise ConfigError(f"cgroups.root: must be a relative path without '.' or '..', got {self.root!r}")
        if "/" in self.yarn_hierarchy or self.yarn_hierarchy in ("", ".", ".."):
            raise ConfigError(
                f"cgroups.yarn_hierarchy: must be one directory name, got {self.yarn_hierarchy!r}")


def check_psi_trigger(spec: str) -> None:
    """A PSI trigger as the kernel takes it: "some|full <stall us> <window us>", 0 < stall ≤ window, and a
    window of 500 ms to 10 s (the kernel refuses any other, root included)."""
    parts = spec.split()
    ok = len(parts) == 3 and parts[0] in ("some", "full") and all(p.isdigit() for p in parts[1:])
    if not ok or not (0 < int(parts[1]) <= int(parts[2]) and 500_000 <= int(parts[2]) <= 10_000_000):
        raise ConfigError(f"loop.psi_trigger: must be \"some|full <stall us> <window us>\" with "
                          f"0 < stall ≤ window and 500000 ≤ window ≤ 10000000, got {spec!r}")


@dataclass(frozen=True)
class LoopConfig:
    """The tick loop (sample, decide, act every `interval_s`) and its fast path between ticks.

    The fast path is woken by the kernel (PSI triggers on the busiest HP cgroups' cpu.pressure) where it can
    be, and otherwise polls: `fast_poll_s` for `fast_hold_s` after a change, `calm_poll_s` when calm."""

    interval_s: float = bounded(1.0, 0.05, 60.0)  # seconds between ticks: sample, decide, act
    fast_path: bool = True  # react between ticks to a rise in HP CPU use or pressure (PSI)
    # the fast path's poll period after a change (at most interval_s)
    fast_poll_s: float = bounded(0.05, 0.005, 60.0)
    # a rise of HP CPU use by this much wakes a tick; a BE budget move this big keeps polling fast
    fast_hp_jump_milli_cpu: int = bounded(200, 1, 1_000_000)
    # without PSI triggers: an HP CPU stall ratio above this, polled, wakes a tick
    fast_psi_stall_ratio: float = bounded(0.05, 0.0, 1.0, low_open=True)
    # The PSI trigger that wakes the fast path, "some|full <stall us> <window us>"; "" never asks the kernel.
    # 20 ms of stall in 500 ms (4 %): the kernel checks every window/10 = 50 ms while HP stalls, so an
    # event comes ~50-100 ms after a stall starts, and at most 2 a second while it lasts. Windows under
    # 2 s need CAP_SYS_RESOURCE; without it the kernel refuses them and the agent polls.
    psi_trigger: str = "some 20000 500000"
    # how many of the busiest HP cgroups get a PSI trigger (or are polled)
    psi_max_cgroups: int = bounded(16, 1, 1024)
    calm_poll_s: float = bounded(0.5, 0.005, 60.0)  # its poll period when calm (at least fast_poll_s)
    # poll at fast_poll_s this long after a change, then at calm_poll_s
    fast_hold_s: float = bounded(3.0, 0.0, 600.0)

    def __post_init__(self) -> None:
        check_choices(self, "loop", ConfigError)
        check_bounds(self, "loop", ConfigError)
        if self.psi_trigger:
            check_psi_trigger(self.psi_trigger)
        if self.calm_poll_s < self.fast_poll_s:  # above interval_s it is the tick that wakes
            raise ConfigError(f"loop.calm_poll_s: must be in [fast_poll_s, 60], got {self.calm_poll_s}")
        if self.fast_poll_s > self.interval_s:
            raise ConfigError(f"loop.fast_poll_s: must be in [0.005, interval_s], got {self.fast_poll_s}")


@dataclass(frozen=True)
class EvictionConfig:
    """How evictions are carried out: rate limit (token bucket), grace period, dry run."""

    dry_run: bool = False  # decide and record evictions, carry none out
    # evictions per minute at most, node-wide (the token bucket's refill)
    rate_per_minute: float = bounded(10.0, 0.0, 100_000.0, low_open=True)
    burst: int = bounded(3, 1, 10_000)  # evictions at once at most (the token bucket's size)
    # a victim's termination grace period (SIGTERM, then SIGKILL)
    grace_period_s: float = bounded(5.0, 0.0, 600.0)
    # a workload evicted once is not evicted again for this long
    recheck_cooldown_s: float = bounded(30.0, 0.0, 86_400.0)

    def __post_init__(self) -> None:
        check_choices(self, "eviction", ConfigError)
        check_bounds(self, "eviction", ConfigError)


@dataclass(frozen=True)
class StateConfig:
    """The node's allocation ledger. `path` "" keeps no state on disk (tests and tools only).

    `await_scheduler_ack`: whether a new incarnation waits RECOVERING for a central scheduler's AckRecovery
    before it admits batch work. "auto" waits when a cluster source (kubelet or YARN) is configured and
    starts SCHEDULABLE in standalone mode; true/false force it (true: a scheduler drives a standalone node
    over the API).

    `epoch_clock_skew_s`: no scheduler epoch above now (ms since the epoch) plus this many seconds is taken,
    so one call cannot fence every real scheduler out (see `agent.state.ledger.LedgerConfig`)."""

    path: str = "/var/lib/coloc-agent/state.json"
    ring_size: int = bounded(4096, 16, 1_000_000)  # ledger events kept for Watch resumption (from_revision)
    # events queued per Watch stream before a slow watcher is dropped
    watch_queue_size: int = bounded(1024, 16, 100_000)
    # an admitted allocation whose workload never appears is released after this long
    pending_launch_ttl_s: float = bounded(300.0, 0.0, 7 * 86_400.0, low_open=True)
    await_scheduler_ack: Literal[True, False, "auto"] = "auto"
    epoch_clock_skew_s: float = bounded(600.0, 0.0, 86_400.0)

    def __post_init__(self) -> None:
        check_choices(self, "state", ConfigError)
        check_bounds(self, "state", ConfigError)
        if self.path and not os.path.isabs(self.path):
            raise ConfigError(f"state.path: must be absolute, got {self.path!r}")

    def awaits_ack(self, cluster_sources: bool) -> bool:
        """The resolved switch: "auto" waits exactly when a cluster source is configured."""
        if isinstance(self.await_scheduler_ack, bool):
            return self.await_scheduler_ack
        return cluster_sources


@dataclass(frozen=True)
class DrainConfig:
    """`cordon`: mark the Kubernetes Node unschedulable while decommissioning (needs sources.kube_api)."""

    cordon: bool = False

    def __post_init__(self) -> None:
        check_choices(self, "drain", ConfigError)


@dataclass(frozen=True)
class AuditConfig:
    """Where audit records go: a JSON-lines file, or "" for the log only."""

    path: str = ""  # the JSON-lines file each act's audit record is appended to; "": the log only


@dataclass(frozen=True)
class LogConfig:
    """The agent's log on stderr."""

    level: Literal["debug", "info", "warning", "error"] = "info"  # the lowest level logged
    format: Literal["auto", "json", "text"] = "auto"  # auto: text on a terminal, JSON lines otherwise

    def __post_init__(self) -> None:
        check_choices(self, "log", ConfigError)


@dataclass(frozen=True)
class AgentConfig:
    """The whole config file: one section per field; a section the file leaves out takes its defaults."""

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
    network: NetworkConfig = field(default_factory=NetworkConfig)
    io: IoConfig = field(default_factory=IoConfig)
    batch_limits: BatchLimitsConfig = field(default_factory=BatchLimitsConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    resource_qos: ResourceQosConfig = field(default_factory=ResourceQosConfig)
    sources: SourcesConfig = field(default_factory=lambda: SourcesConfig(
        kubelet=KubeletConfig(enabled=False), yarn=NodeManagerConfig(enabled=False),
        kube_api=KubeApiConfig(enabled=False), reporting=ReportingConfig(mode="off")))

    def __post_init__(self) -> None:
        if self.drain.cordon and not self.sources.kube_api.enabled:
            raise ConfigError("drain.cordon: needs the Kubernetes API (a sources.kube_api section)")


_OFF = {"kubelet": {"enabled": False}, "yarn": {"enabled": False}, "kube_api": {"enabled": False},
        "reporting": {"mode": "off"}, "nodemetric": {"enabled": False}, "nodeslo": {"enabled": False}}


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


@dataclass(frozen=True)
class LoadedConfig:
    """A config file as the loader read it: the config, and the dotted keys the file set (`file_keys`)."""

    config: AgentConfig
    keys: frozenset[str]
    sections: tuple[str, ...]  # the top-level sections the file names


def load_config(path: str | Path) -> AgentConfig:
    """Read and validate a YAML config file; raise ConfigError naming the file and the field."""
    return read_config(path).config


def read_config(path: str | Path) -> LoadedConfig:
    """`load_config`, and which keys the file set (`status` and `config show` say which the file set)."""
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config: {err.strerror}") from err
    try:
        data = parse_yaml(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    try:
        cfg = from_mapping(AgentConfig, with_source_defaults(data))
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err
    keys = file_keys(data, AgentConfig) | _implied_source_switches(data)
    names = tuple(str(k) for k in data) if isinstance(data, dict) else ()
    return LoadedConfig(cfg, keys, names)


def _implied_source_switches(data: object) -> frozenset[str]:
    """`sources.<name>.enabled` of each source section the file names: the section itself turns it on
    (`with_source_defaults`), so the file set it."""
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, dict):
        return frozenset()
    return frozenset(f"sources.{name}.enabled" for name in _OFF if name != "reporting" and name in sources)
