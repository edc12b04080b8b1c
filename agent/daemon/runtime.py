"""Wire the agent together from its config: cgroups, sources, collector, policies, executors, loop, APIs.

Every object is given what it talks to when it is made, in the order data flows: sources and Node reports,
the collector, the executor, the policy settings, the hooks and observers, then the loop.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from kubernetes import client

    from agent.executors.htb import EgressShaper
    from cgroups.systemd import SystemdUnits

from agent.config.agent import AgentConfig
from agent.daemon import batch_limits, resource_qos
from agent.daemon.audit import AuditLog
from agent.daemon.cgroup_tree import BE_TIER, remove_tree, setup_tiers
from agent.daemon.collector import WORKLOAD_READER, Collector, TierPaths
from agent.daemon.egress_left import LeftEgress
from agent.daemon.ledger_feed import LedgerFeed
from agent.daemon.loop import LoopTiming, TickHook, TickInputs, TickLoop, TickOutputs
from agent.daemon.node_reports import NodeReports
from agent.daemon.settings import PipelineInForce
from agent.daemon.source_runner import WorkloadSources, pod_cgroup_lister
from agent.decommission.controller import DrainController
from agent.executors.apply import ActionExecutor, Evictor
from agent.executors.io_guard import BE_IO, IoGuard, NodeSloBlkio
from agent.executors.process_kill import LocalEvictor
from agent.executors.yarn_kill import YarnKiller
from agent.metrics import MetricsHub
from agent.published import Board
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.qos_pods import QosKubeletSource
from agent.sources.settings import SettingsInForce
from agent.sources.standalone import StandaloneScanner
from agent.sources.yarn import NodeManagerSource
from agent.state import Ledger, LedgerConfig, StateFileError
from agent.state.lifecycle import reports_batch
from agent.trace.params import TickSettings, tick_settings
from agent.trace.params import yarn_entries as yarn_entries  # noqa: PLC0414 - re-exported: tests use it here
from agent.trace.switch import TraceSwitch
from cgroups.discovery import Hierarchy, detect_driver, discover, resolve_root
from cgroups.errors import CgroupError
from cgroups.holdings import Journal
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.blkio_qos import be_device_caps, unsupported
from qos.model import NetworkSample, Resources, Source, Workload
from qos.policies import PolicyConfig

log = logging.getLogger("coloc.runtime")


class StartError(Exception):
    """A start-up step failed; the message names the setting, its value and why (`coloc-agent run` prints it
    as one line and exits 2)."""


@dataclass
class Runtime:
    """Everything the running agent holds; built by `build`, torn down by `close`."""

    cfg: AgentConfig
    hierarchy: Hierarchy
    reader: CgroupReader
    writer: CgroupWriter
    collector: Collector
    sources: WorkloadSources
    reports: NodeReports
    executor: ActionExecutor
    loop: TickLoop
    board: Board
    audit: AuditLog
    capacity: Resources
    cpus: tuple[int, ...]
    metrics: MetricsHub
    ledger: Ledger
    drain: DrainController
    settings: SettingsInForce
    egress_left: LeftEgress
    limits: batch_limits.BatchLimitsController | None = None  # BE pods' batch limits: a task of its own
    resource_qos: resource_qos.ResourceQosRunner | None = None  # memory QoS and CPU burst: a task too
    created_root: bool = False  # made by this agent, now or by an earlier incarnation (its mark: `RootMark`)
    network: EgressShaper | None = None  # BE egress control; its task is `network.run(stop)`
    io: IoGuard | None = None  # the disk guard; its task is `io.run(stop)`
    io_off: str = ""  # why the disk guard does not run ("" when it does, or is turned off)
    made: tuple[str, ...] = ()  # the cgroups this start made (`setup_tiers`), parents first
    trace: TraceSwitch | None = None  # the trace's recording (`trace:`, or the admin socket's `Record`)

    def close(self, *, failed_start: bool = False) -> None:
        """Release what the agent holds. At a clean exit the agent's own root goes (`cleanup_on_exit`); after
        a start that failed (a port or socket taken after `build`), what this start made goes, and no more
        (`_undo_setup`)."""
        self.collector.close()
        if self.io is not None:
            self.io.close()
        self.reader.close()
        self.audit.close()
        if self.trace is not None:
            self.trace.close()
        if failed_start:
            _undo_setup(self.writer, self.reader, list(self.made))
        elif self.created_root and self.cfg.cgroups.cleanup_on_exit:
            _remove_root(self.writer, self.reader)
        self.writer.journal.close()


class RootMark:
    """The cgroup root this agent made, a mark in the journal of holdings (`cgroups/holdings.py`).

    A root the agent made is removed on a clean exit (`cgroups.cleanup_on_exit`); remembered only in memory,
    a crash would lose that, and the next agent would adopt the root and leave it for good. The mark is made
    before the root and goes once the root is gone; a root found already there (the kubelet's `kubepods`)
    never gets one. A name is not an identity (someone else may make a directory of that name), so once the
    root is made the mark also names its directory's inode; the journal is of this boot only. A mark made
    just before a crash, with no inode yet, claims nothing: the root is then left, never wrongly removed."""

    KIND = "root"

    def __init__(self, journal: Journal, mount: str, root: str) -> None:
        self._journal = journal
        self._where = {"mount": mount, "root": root.strip("/")}

    def claims(self, inode: int | None) -> bool:
        """Whether an earlier run of this boot marked this very root, as the directory `inode`."""
        marked = self._journal.marks_left.get(self.KIND)
        return inode is not None and marked == {**self._where, "inode": inode}

    def record(self, inode: int | None = None) -> None:
        """The agent is about to make the root (no inode yet), or has made it as the directory `inode`."""
        self._journal.mark(self.KIND, {**self._where, "inode": inode})


def _remove_root(writer: CgroupWriter, reader: CgroupReader) -> None:
    """Remove the agent's own root; its mark goes only with it (a root left half-removed stays ours)."""
    if remove_tree(writer, reader, "") == 0:
        writer.journal.unmark(RootMark.KIND)


def machine_capacity() -> tuple[Resources, tuple[int, ...]]:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return Resources(len(cpus) * 1000, psutil.virtual_memory().total), cpus


def node_capacity(cfg: AgentConfig) -> tuple[Resources, tuple[int, ...]]:
    machine, cpus = machine_capacity()
    milli = int(cfg.node.cpus * 1000) if cfg.node.cpus is not None else machine.milli_cpu
    mem = cfg.node.memory_bytes if cfg.node.memory_bytes is not None else machine.memory_bytes
    ncpu = max(1, min(len(cpus), -(-milli // 1000)))
    return Resources(milli, mem), cpus[:ncpu]


def open_ledger(cfg: AgentConfig) -> Ledger:
    """Load (or start) the persisted ledger; a corrupt state file is set aside and reported, not fatal."""
    return Ledger.open(LedgerConfig(
        node_id=cfg.node.node_name, state_path=cfg.state.path or None, ring_size=cfg.state.ring_size,
        watch_queue_size=cfg.state.watch_queue_size, pending_launch_ttl_s=cfg.state.pending_launch_ttl_s,
        await_scheduler_ack=cfg.state.awaits_ack(cfg.sources.kubelet.enabled or cfg.sources.yarn.enabled),
        epoch_clock_skew_s=cfg.state.epoch_clock_skew_s))


def agent_root(cfg: AgentConfig, hierarchy: Hierarchy) -> str:
    """`cgroups.root` as it exists here (`kubepods` ↔ `kubepods.slice`: cgroups/discovery.py)."""
    configured = cfg.cgroups.root.strip("/")
    if cfg.cgroups.setup_tiers:
        return configured  # the agent lays the root out itself, as named
    try:
        root = resolve_root(hierarchy, configured, cfg.cgroups.driver)
    except (CgroupError, OSError):
        return configured
    if root != configured:
        log.info("cgroups.root resolved for this node's cgroup driver",
                 extra={"fields": {"configured": configured, "root": root}})
    return root


def systemd_units(cfg: AgentConfig, hierarchy: Hierarchy, layout: Layout) -> SystemdUnits | None:
    """On the systemd driver, the knobs of a tier or pod that is a systemd unit go through systemd
    (cgroups/systemd.py); None elsewhere, or when systemd cannot be reached (then files only, said once)."""
    if layout.driver != "systemd" or cfg.cgroups.systemd_bus == "off" or cfg.cgroups.setup_tiers:
        return None
    from cgroups.systemd import SystemdError, SystemdUnits

    # systemd names a unit's cgroup by its path from the hierarchy's root, as the agent's root is named.
    bus = "" if cfg.cgroups.systemd_bus == "auto" else cfg.cgroups.systemd_bus
    units = SystemdUnits("/" + cfg.cgroups.root.strip("/"), bus)
    if bus:  # a socket named in the config is required: a wrong path is a mistake, not a slow systemd
        try:
            units.version()
        except SystemdError as err:
            raise StartError(f"cgroups.systemd_bus {bus}: {err} (auto tries systemd's own sockets and waits "
                             f"for them; off sets the cgroup files only)") from err
    elif not units.available():  # kept: asked again at each change (it may be starting, or slow)
        log.warning("the systemd driver is in use but systemd does not answer over D-Bus yet: until it "
                    "does, knobs go to the cgroup files only, and systemd puts its own values back on "
                    "daemon-reload or a pod start (mount /run/systemd into the agent's container)",
                    extra={"fields": {"bus": cfg.cgroups.systemd_bus}})
    return units


def make_layout(cfg: AgentConfig, hierarchy: Hierarchy, root: str | None = None) -> Layout:
    override = None if cfg.cgroups.driver == "auto" else cfg.cgroups.driver
    root = cfg.cgroups.root.strip("/") if root is None else root
    kubepods = root.rsplit("/", 1)[-1].removesuffix(".slice") or "kubepods"
    try:
        driver = detect_driver(hierarchy, kubepods, root=root, override=override)
    except (CgroupError, OSError):
        driver = "cgroupfs"
    return Layout(driver, kubepods=kubepods, yarn_hierarchy=cfg.cgroups.yarn_hierarchy)


def make_sources(cfg: AgentConfig, layout: Layout, reader: CgroupReader,
                 hierarchy: Hierarchy) -> WorkloadSources:
    """The workload sources: the kubelet (or the standalone scan) and the NodeManager."""
    root = cfg.cgroups.root.strip("/")
    kubelet = (QosKubeletSource(cfg.sources.kubelet, layout, protection=cfg.protection)
               if cfg.sources.kubelet.enabled else None)
    scanner = None
    if kubelet is None and cfg.standalone.enabled:
        scanner = StandaloneScanner(
            cfg.standalone, lambda rel: [c.rsplit("/", 1)[-1] for c in reader.children(rel)],
            layout.tier(BE_TIER), layout.tier("burstable"), cfg.cgroups.yarn_hierarchy,
            lambda rel: str(hierarchy.controller_dir("cpu") / root / rel),
            scan_yarn=not cfg.sources.yarn.enabled)
    yarn = None
    if cfg.sources.yarn.enabled:
        yarn = NodeManagerSource(cfg.sources.yarn, layout, reader.children, kubelet=kubelet,
                                 cgroup_dir=reader.dir, capacity=node_capacity(cfg)[0])
    pods = pod_cgroup_lister(reader, layout) if kubelet is not None else None
    return WorkloadSources(scanner, kubelet, yarn, pod_cgroups=pods)


def make_reports(cfg: AgentConfig, sources: WorkloadSources, api_client: object | None,
                 settings: SettingsInForce, capacity: Resources) -> NodeReports:
    """The Node's annotations, NodeMetric and NodeSLO, each where it is on (the API server is used)."""
    if api_client is None:
        return NodeReports()
    max_body = cfg.sources.kube_api.max_body_bytes
    annotations = None
    if cfg.sources.reporting.mode != "off":
        from agent.reporting.node_annotations import NodeReporter  # Kubernetes-only modules: when it is on
        annotations = NodeReporter(cfg.sources.reporting, api_client, cfg.node.node_name,  # type: ignore[arg-type]
                                   max_body_bytes=max_body)
    nodemetric = None
    if cfg.sources.nodemetric.enabled:
        from agent.reporting.nodemetric import NodeMetricReporter
        kubelet = sources.kubelet
        nodemetric = NodeMetricReporter(
            cfg.sources.nodemetric, api_client, cfg.node.node_name,  # type: ignore[arg-type]
            kubelet.pods if kubelet is not None else tuple, max_body_bytes=max_body)
    nodeslo = None
    if cfg.sources.nodeslo.enabled:
        from agent.sources.nodeslo import NodeSloSource
        nodeslo = NodeSloSource(cfg.sources.nodeslo, api_client, cfg.node.node_name,  # type: ignore[arg-type]
                                capacity, settings, max_body_bytes=max_body)
    return NodeReports(annotations, cfg.sources.reporting.resync_s, yarn=sources.yarn, nodemetric=nodemetric,
                       nodeslo=nodeslo)


def yaml_resource_qos(cfg: AgentConfig) -> ResourceQos:
    """Memory QoS and CPU burst from the YAML (the fallback where the NodeSLO gives none)."""
    return ResourceQos(cfg.resource_qos.memory_qos, cfg.resource_qos.cpu_burst)


def make_evictors(cfg: AgentConfig, layout: Layout, reader: CgroupReader, writer: CgroupWriter,
                  api_client: object | None) -> dict[Source, Evictor]:
    local = LocalEvictor(reader, writer, cfg.eviction.grace_period_s)
    evictors: dict[Source, Evictor] = {Source.LOCAL: local, Source.YARN: local}
    if cfg.sources.yarn.enabled:
        evictors[Source.YARN] = YarnKiller(layout, reader, writer, cfg.eviction.grace_period_s)
    if api_client is not None:
        from agent.executors.k8s_eviction import K8sEvictor
        evictors[Source.K8S] = K8sEvictor(cfg.sources.kube_api, api_client,  # type: ignore[arg-type]
                                          cfg.node.node_name)
    return evictors


def build(cfg: AgentConfig, board: Board | None = None, file_keys: frozenset[str] | None = None) -> Runtime:
    """Everything but the async parts (sources' refresh tasks, API server, metrics server). A step that
    cannot be done raises `StartError` naming its setting (or, past the tiers, the step's own error), after
    undoing what this start made. `file_keys`: the keys the config file set (`read_config`), for `status`."""
    hierarchy = _hierarchy(cfg)
    root = agent_root(cfg, hierarchy)
    cfg = dataclasses.replace(cfg, cgroups=dataclasses.replace(cfg.cgroups, root=root))
    # The collector samples with it and uses neither the memory limit nor memory pressure.
    reader = CgroupReader(hierarchy, root, memory_psi=False, memory_limit=False)
    layout = make_layout(cfg, hierarchy)
    capacity, cpus = node_capacity(cfg)
    trace_dir_usable(cfg)
    # The ledger first: a state directory that cannot be used stops start-up before any cgroup is made.
    try:
        ledger = open_ledger(cfg)
    except StateFileError as err:
        raise StartError(f"state.path {cfg.state.path}: {err}; it must be on a writable directory with "
                         f"free space (the DaemonSet's 'state' hostPath volume)") from err
    writer = CgroupWriter(hierarchy, root, units=systemd_units(cfg, hierarchy, layout),
                          journal=Journal.beside(cfg.state.path, scope=f"{cfg.cgroups.mount}:{root}"))
    mark = RootMark(writer.journal, cfg.cgroups.mount, root)
    made: list[str] = []
    owned = False
    try:
        if cfg.cgroups.setup_tiers:
            if not reader.exists(""):
                mark.record()  # before the root exists: a crash in between leaves a mark, never an orphan
            try:
                created = setup_tiers(writer, reader, cpus, layout, made)
            except (CgroupError, OSError) as err:
                raise StartError(f"cgroups.root {root}: cannot lay out the tiers (cgroups.setup_tiers) "
                                 f"under cgroups.mount {cfg.cgroups.mount}: {err}") from err
            if "" in made:
                mark.record(_root_inode(reader))  # now it names this very directory, in this boot
            owned = created or mark.claims(_root_inode(reader))
        else:
            warn_missing_root(cfg, reader, layout)
        rt = _assemble(cfg, board, hierarchy, reader, writer, layout, capacity, cpus, ledger, owned,
                       file_keys)
    except BaseException:
        _undo_setup(writer, reader, made)
        raise
    rt.made = tuple(made)
    return rt


def _hierarchy(cfg: AgentConfig) -> Hierarchy:
    """The cgroup mounts at or below `cgroups.mount`."""
    try:
        return discover(base=Path(cfg.cgroups.mount))
    except (CgroupError, OSError, ValueError) as err:
        why = str(err).replace(f" under {cfg.cgroups.mount}", "")
        raise StartError(f"cgroups.mount {cfg.cgroups.mount}: {why}") from err


def warn_missing_root(cfg: AgentConfig, reader: CgroupReader, layout: Layout) -> None:
    """With `setup_tiers: false` the root and its BE tier are the kubelet's: say once, at start, when either
    is not there (the agent runs, not ready, and acts on nothing until they are)."""
    if not reader.exists(""):
        log.warning("cgroups.root does not exist: nothing to act on until it is made (by the kubelet; or set "
                    "cgroups.setup_tiers to make it)",
                    extra={"fields": {"root": cfg.cgroups.root, "dir": str(reader.dir(""))}})
    elif not reader.exists(be := layout.tier(BE_TIER)):
        log.warning("no BE tier under cgroups.root: BE work cannot be suppressed until it is made (the "
                    "kubelet makes it with the first BestEffort pod)",
                    extra={"fields": {"root": cfg.cgroups.root, "dir": str(reader.dir(be))}})


def _root_inode(reader: CgroupReader) -> int | None:
    """The root directory's inode in its first hierarchy (what a marker of a made root records)."""
    try:
        return os.stat(reader.dir("")).st_ino
    except OSError:
        return None


def _undo_setup(writer: CgroupWriter, reader: CgroupReader, made: list[str]) -> None:
    """Start-up failed after the tiers were laid out: remove what this start made, and no more. A root an
    earlier incarnation made (`owned` by its marker) keeps the work that survived that crash: a crash loop
    must not kill it at every failed restart; a clean exit removes it."""
    if "" in made:
        _remove_root(writer, reader)
        return
    for rel in reversed(made):
        remove_tree(writer, reader, rel)


def _assemble(cfg: AgentConfig, board: Board | None, hierarchy: Hierarchy, reader: CgroupReader,
              writer: CgroupWriter, layout: Layout, capacity: Resources, cpus: tuple[int, ...],
              ledger: Ledger, owned: bool, file_keys: frozenset[str] | None) -> Runtime:
    """`build` after the ledger and the tiers: sources, collector, executor, policies, the loop."""
    root = cfg.cgroups.root.strip("/")
    be_tier = layout.tier(BE_TIER)
    api_client = None
    if cfg.sources.kube_api.enabled:  # the Kubernetes client stack (~30 MB) only when the API server is used
        from agent.sources.kubeapi import make_api_client
        api_client = make_api_client(cfg.sources.kube_api)
    settings = SettingsInForce(cfg.policies, yaml_resource_qos(cfg), file_keys=file_keys,
                               nodeslo=api_client is not None and cfg.sources.nodeslo.enabled)
    sources = make_sources(cfg, layout, reader, hierarchy)
    reports = make_reports(cfg, sources, api_client, settings, capacity)
    if cfg.network.enabled:  # pyroute2 and its ~190 modules (~9 MB) only when shaping egress
        from agent.executors.htb import EgressShaper
    shaper = (EgressShaper(cfg.network, cfg.loop.interval_s, hierarchy.unified)
              if cfg.network.enabled else None)
    blkio = NodeSloBlkio(lambda: be_device_caps(settings.resource_qos.blkio),
                         lambda: unsupported(settings.resource_qos.blkio))
    guard, io_off = make_io_guard(cfg, writer, be_tier, blkio)
    collector = Collector(reader, TierPaths(root="", besteffort=be_tier), capacity, cpus,
                          cfg.node.scope, cfg.loop.interval_s,
                          be_reader=CgroupReader(hierarchy, root, psi=False, **WORKLOAD_READER),
                          # HP's throttling: the worst HP workload's, a sign its own limit binds
                          hp_reader=CgroupReader(hierarchy, root, memory_psi=False,
                                                 **{**WORKLOAD_READER, "throttling": True}),
                          network=_egress_reader(shaper, sources),
                          io=guard.sample if guard is not None else None)
    audit = AuditLog(cfg.audit.path)
    evictors = make_evictors(cfg, layout, reader, writer, api_client)
    executor = ActionExecutor(
        writer, be_tier, evictors,
        dry_run=cfg.eviction.dry_run, rate_per_s=cfg.eviction.rate_per_minute / 60.0,
        burst=cfg.eviction.burst, recheck_cooldown_s=cfg.eviction.recheck_cooldown_s, audit=audit,
        now=time.monotonic(), tier_owned=cfg.cgroups.setup_tiers, network=shaper, io=guard)
    board = board or Board()
    hub = MetricsHub(cfg.metrics)
    drain = DrainController(ledger, _has_processes(reader))
    inputs = TickInputs(collector, sources.list, origin_annotation=lambda: reports.origin_annotation,
                        third_party_annotation=lambda: reports.third_party_annotation,
                        drain_view=drain.view, sources_synced=sources.synced, source_ages=sources.ages,
                        usage_report_age=reports.usage_report_age, settings_sources=settings.source_map)
    in_force = PipelineInForce(settings, _settings_builder(cfg, guard is not None))
    trace = make_trace(cfg, in_force, ledger, settings)
    outputs = TickOutputs(board, _hooks(cfg, ledger, drain, evictors, api_client),
                          observers=(hub.observe, reports.observe),
                          admissions_refused=lambda: ledger.refusals, trace=trace.record)
    timing = LoopTiming(cfg.loop.interval_s, cfg.loop.fast_path, cfg.loop.fast_poll_s,
                        cfg.loop.fast_hp_jump_milli_cpu, cfg.loop.fast_psi_stall_ratio,
                        cfg.loop.psi_max_cgroups, cfg.loop.psi_trigger, cfg.loop.calm_poll_s,
                        cfg.loop.fast_hold_s)
    loop = TickLoop(inputs, in_force.pipeline, executor, outputs, timing)
    limits, qos = make_limits(cfg, hierarchy, writer, sources, settings, ledger, hub)
    return Runtime(cfg, hierarchy, reader, writer, collector, sources, reports, executor, loop, board, audit,
                   capacity, cpus, hub, ledger, drain, settings, LeftEgress(writer.journal, cfg.network,
                                                                            hierarchy.unified),
                   limits, qos, owned, network=shaper, io=guard, io_off=io_off, trace=trace)


def trace_dir_usable(cfg: AgentConfig) -> None:
    """A trace turned on in the config needs its directory: one that cannot be made or written stops start-up
    before anything is made, naming the setting."""
    t = cfg.trace
    if not t.enabled:
        return
    try:
        Path(t.dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(t.dir, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as err:
        raise StartError(f"trace.dir {t.dir}: {err.strerror or err}; it must be a directory the agent can "
                         f"write (trace.enabled is true)") from err


def make_trace(cfg: AgentConfig, in_force: PipelineInForce, ledger: Ledger,
               settings: SettingsInForce) -> TraceSwitch:
    """The trace's switch: recording from the start when `trace.enabled`, else when the admin socket asks."""
    t = cfg.trace
    switch = TraceSwitch(t, in_force.settings, ledger.take_judged, cfg.node.node_name,
                         origins=settings.source_map)
    if t.enabled:
        switch.start(switch.open_writer(), None)
        log.info("recording a trace",
                 extra={"fields": {"dir": t.dir, "file_mb": t.file_mb, "files": t.files}})
    return switch


def make_limits(cfg: AgentConfig, hierarchy: Hierarchy, writer: CgroupWriter, sources: WorkloadSources,
                settings: SettingsInForce, ledger: Ledger,
                hub: MetricsHub) -> tuple[batch_limits.BatchLimitsController | None,
                                          resource_qos.ResourceQosRunner | None]:
    """BE pods' batch limits and memory QoS / CPU burst, each with its /metrics (None: off; what an earlier
    run held for it is given back now)."""
    layout = make_layout(cfg, hierarchy)

    def batch_memory() -> int | None:
        """The node's batch-memory budget as the ledger holds it; None while the node offers no batch room (a
        drain reports 0: no reason to cap BE work already running)."""
        node = ledger.node
        return node.batch_allocatable.memory_bytes if reports_batch(node.lifecycle) else None

    limits = batch_limits.build(cfg.batch_limits, sources.kubelet, writer, layout,
                                lambda: settings.policies.suppression, sources.yarn, batch_memory)
    wanted = cfg.resource_qos.turned_on or cfg.sources.nodeslo.enabled
    qos = resource_qos.build(sources.kubelet, settings, writer, layout, wanted=wanted)
    if limits is not None:
        hub.registry.register(batch_limits.BatchLimitsMetrics(limits))
    if qos is not None:
        hub.registry.register(resource_qos.ResourceQosMetrics(qos))
    return limits, qos


def make_io_guard(cfg: AgentConfig, writer: CgroupWriter, be_tier: str,
                  nodeslo: NodeSloBlkio) -> tuple[IoGuard | None, str]:
    """The disk guard (None: off, or nothing to guard, and why); off, what an earlier run's guard held is
    given back now."""
    guard, why = IoGuard.build(cfg.io, writer, be_tier, nodeslo) if cfg.io.enabled else (None, "")
    if guard is None:
        if why:
            log.warning("the disk guard does not run", extra={"fields": {"why": why}})
        writer.settle(BE_IO)
    return guard, why


def _settings_builder(cfg: AgentConfig, io: bool = False) -> Callable[[PolicyConfig], TickSettings]:
    """The settings of a tick for a set of policy settings (the YAML's, then NodeSLO's)."""
    if cfg.policies.suppression.cpu_idle and not cfg.cgroups.setup_tiers:
        log.info("cpu.idle stays off: the kubelet owns the BE tier (cgroups.setup_tiers is false) and writes "
                 "its cpu.shares, which the kernel refuses on an idle cgroup; BE is suppressed by its cpuset")

    def build(settings: PolicyConfig) -> TickSettings:
        return tick_settings(cfg, settings, io)
    return build


def _egress_reader(shaper: EgressShaper | None,
                   sources: WorkloadSources) -> Callable[[tuple[Workload, ...]], NetworkSample] | None:
    """The shaper's last reading, with the BE pods' addresses (from the kubelet) of this tick's workloads."""
    if shaper is None:
        return None

    from agent.executors.htb import be_addresses

    def read(workloads: tuple[Workload, ...]) -> NetworkSample:
        pods = sources.kubelet.workloads().pods if sources.kubelet is not None else {}
        return shaper.sample(be_addresses(workloads, pods))
    return read


def _hooks(cfg: AgentConfig, ledger: Ledger, drain: DrainController, evictors: dict[Source, Evictor],
           api_client: client.ApiClient | None) -> tuple[TickHook, ...]:
    """After each tick, in this order: the ledger sync, the drain's progress, drain pod events, cordon."""
    hooks: tuple[TickHook, ...] = (LedgerFeed(ledger).on_tick, drain.on_tick)
    if api_client is None:
        return hooks
    from agent.decommission.events import DrainPodEvents
    from agent.executors.k8s_eviction import K8sEvictor
    from agent.reporting.cordon import DrainCordon

    k8s = evictors.get(Source.K8S)
    if isinstance(k8s, K8sEvictor):
        hooks += (DrainPodEvents(ledger, k8s).on_tick,)
    # also with cordoning off: a cordon an earlier run left (its annotation says so) is lifted
    hooks += (DrainCordon(ledger, api_client, cfg.node.node_name, cfg.sources.kube_api.timeout_s,
                          cordon=cfg.drain.cordon).on_tick,)
    return hooks


def _has_processes(reader: CgroupReader) -> Callable[[str], bool | None]:
    """A drain's test for a finished container: its cgroup is there but holds no process."""
    def has(rel: str) -> bool | None:
        try:
            return bool(reader.pids(rel))
        except (CgroupError, OSError):
            return None
    return has
