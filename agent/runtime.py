"""Wire the agent together from its config: cgroups, sources, collector, policies, executors, loop, APIs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agent.audit import AuditLog
from agent.collect import Collector, TierPaths
from agent.config import AgentConfig
from agent.executors.apply import ActionExecutor, Evictor
from agent.executors.process_kill import LocalEvictor
from agent.loop import LoopTiming, TickLoop
from agent.metrics import MetricsHub
from agent.published import ActionRecord, Board
from agent.standalone import StandaloneScanner
from agent.state import Ledger, LedgerConfig
from cgroups.discovery import Hierarchy, discover
from cgroups.errors import CgroupError
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import Action
from qos.batch import BatchConfig, local_origin
from qos.model import NodeSnapshot, Resources, Source, Workload

log = logging.getLogger("coloc.runtime")

BE_TIER = "besteffort"
BURSTABLE_TIER = "burstable"
BE_SHARES = 2  # what the kubelet gives the besteffort tier


@dataclass
class Runtime:
    """Everything the running agent holds; built by `build`, torn down by `close`."""

    cfg: AgentConfig
    hierarchy: Hierarchy
    reader: CgroupReader
    writer: CgroupWriter
    collector: Collector
    scanner: StandaloneScanner
    executor: ActionExecutor
    loop: TickLoop
    board: Board
    audit: AuditLog
    capacity: Resources
    cpus: tuple[int, ...]
    metrics: MetricsHub
    ledger: Ledger | None = None
    created_root: bool = False
    extra_tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def list_workloads(self) -> tuple[list[Workload], dict[str, str]]:
        try:
            return self.scanner.scan(), {}
        except CgroupError as err:
            return [], {"standalone": f"cannot list cgroups: {err}"}

    def close(self) -> None:
        self.reader.close()
        self.audit.close()
        if self.created_root and self.cfg.cgroups.cleanup_on_exit:
            remove_tree(self.writer, self.reader, "")


def machine_capacity() -> tuple[Resources, tuple[int, ...]]:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return Resources(len(cpus) * 1000, psutil.virtual_memory().total), cpus


def node_capacity(cfg: AgentConfig) -> tuple[Resources, tuple[int, ...]]:
    machine, cpus = machine_capacity()
    milli = int(cfg.node.cpus * 1000) if cfg.node.cpus is not None else machine.milli_cpu
    mem = cfg.node.memory_bytes if cfg.node.memory_bytes is not None else machine.memory_bytes
    ncpu = max(1, min(len(cpus), -(-milli // 1000)))
    return Resources(milli, mem), cpus[:ncpu]


def setup_tiers(writer: CgroupWriter, reader: CgroupReader, cpus: tuple[int, ...], yarn: str) -> bool:
    """Lay the tiers out as the kubelet does (besteffort `cpu.shares` 2); return whether the root was new."""
    created = not reader.exists("")
    writer.mkdir("")
    writer.set_cpuset("", cpus)
    for tier in (BURSTABLE_TIER, BE_TIER, f"{BE_TIER}/{yarn}"):
        writer.mkdir(tier)
        writer.set_cpuset(tier, cpus)
    writer.set_cpu_shares(BE_TIER, BE_SHARES)
    return created


def remove_tree(writer: CgroupWriter, reader: CgroupReader, rel: str) -> None:
    """Kill what is left in `rel` and below, then remove the whole subtree, deepest first."""
    try:
        tree = reader.walk(rel)
    except CgroupError:
        return
    for sub in reversed(tree):
        with contextlib.suppress(CgroupError):
            if reader.pids(sub):
                writer.kill_all(sub, 9)
                deadline = time.monotonic() + 5
                while reader.pids(sub) and time.monotonic() < deadline:
                    time.sleep(0.02)
    with contextlib.suppress(CgroupError):
        writer.rmdir(rel, recursive=True)


def open_ledger(cfg: AgentConfig) -> Ledger:
    """Load (or start) the persisted ledger; a corrupt state file is set aside and reported, not fatal."""
    return Ledger.open(LedgerConfig(
        node_id=cfg.node.node_name, state_path=cfg.state.path or None, ring_size=cfg.state.ring_size,
        watch_queue_size=cfg.state.watch_queue_size, pending_launch_ttl_s=cfg.state.pending_launch_ttl_s))


class LedgerFeed:
    """Each tick: bring the ledger in line with the snapshot and turn what was done into notices."""

    def __init__(self, ledger: Ledger, batch: BatchConfig) -> None:
        self._ledger = ledger
        self._batch = batch

    def on_tick(self, snap: NodeSnapshot, _actions: list[Action], records: list[ActionRecord]) -> None:
        origin = local_origin(snap, self._batch)
        if origin is None:  # system usage unmeasured this tick: keep what was reported
            origin = self._ledger.node.batch_allocatable
        self._ledger.sync(snap, origin, time.time())
        for r in records:
            if r.kind == "evict" and r.outcome in ("started", "dry_run"):
                self._ledger.notice("eviction", r.reason, {"key": r.target, "policy": r.policy,
                                                           "outcome": r.outcome})
            elif r.kind in ("set_be_cpuset", "set_be_cpu_quota") and r.outcome == "applied":
                self._ledger.notice("suppression", r.reason, {"knob": r.kind, "value": r.target})


def build(cfg: AgentConfig, board: Board | None = None, *, with_ledger: bool = True) -> Runtime:
    hierarchy = discover(base=Path(cfg.cgroups.mount))
    root = cfg.cgroups.root.strip("/")
    reader = CgroupReader(hierarchy, root)
    writer = CgroupWriter(hierarchy, root)
    capacity, cpus = node_capacity(cfg)
    created = False
    if cfg.cgroups.setup_tiers:
        created = setup_tiers(writer, reader, cpus, cfg.cgroups.yarn_hierarchy)
    collector = Collector(reader, TierPaths(root="", besteffort=BE_TIER), capacity, cpus,
                          cfg.node.scope, cfg.loop.interval_s)
    scanner = StandaloneScanner(
        cfg.standalone, lambda rel: [c.rsplit("/", 1)[-1] for c in reader.children(rel)], BE_TIER,
        BURSTABLE_TIER, cfg.cgroups.yarn_hierarchy,
        lambda rel: str(hierarchy.controller_dir("cpu") / root / rel))
    audit = AuditLog(cfg.audit.path)
    local = LocalEvictor(reader, writer, cfg.eviction.grace_period_s)
    evictors: dict[Source, Evictor] = {Source.LOCAL: local, Source.YARN: local}
    executor = ActionExecutor(
        writer, BE_TIER, evictors,
        dry_run=cfg.eviction.dry_run, rate_per_s=cfg.eviction.rate_per_minute / 60.0,
        burst=cfg.eviction.burst, recheck_cooldown_s=cfg.eviction.recheck_cooldown_s, audit=audit,
        now=time.monotonic())
    board = board or Board()
    rt_holder: list[Runtime] = []  # the loop lists workloads through the runtime, built just below

    def list_workloads() -> tuple[list[Workload], dict[str, str]]:
        return rt_holder[0].list_workloads()

    hub = MetricsHub(cfg.metrics)
    ledger = open_ledger(cfg) if with_ledger else None
    hooks = (LedgerFeed(ledger, cfg.batch).on_tick,) if ledger is not None else ()
    loop = TickLoop(
        collector, list_workloads, executor, cfg.policies, board,
        LoopTiming(cfg.loop.interval_s, cfg.loop.fast_path, cfg.loop.fast_poll_s,
                   cfg.loop.fast_hp_jump_milli_cpu, cfg.loop.fast_psi_stall_ratio),
        hooks=hooks, on_publish=(hub.observe,))
    rt = Runtime(cfg, hierarchy, reader, writer, collector, scanner, executor, loop, board, audit, capacity,
                 cpus, hub, ledger, created)
    rt_holder.append(rt)
    return rt
