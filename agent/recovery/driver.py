"""Scheduler-side recovery: rebuild the cluster from every agent, node by node.

Scheduler state machine: New → Registered (every listed agent known, nothing schedulable) → Recovering
→ Running (every node recovered or lost) | Failed (fenced by a newer scheduler epoch). There is no global
timeout: each node is recovered on its own or declared lost after `lost_after_s` without success, counted
from its first attempt (not while it waits for one of the `parallel` slots), and a lost node that answers
later is recovered then.

Per node: GetSnapshot → apply node, applications, allocations → Watch(from the snapshot's revision) →
apply the backlog up to INITIAL_SYNC_END → AckRecovery(applied revision) → recovered; then keep
applying events. A dropped stream resumes from the last applied revision; OUT_OF_RANGE, another
incarnation or a broken stream rule forces a new snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from agent.api.client import AgentCallError, AgentClient, Marker
from agent.recovery.cluster import Cluster, NodeCache, NodeState, ProtocolError

log = logging.getLogger("coloc.recovery")


class SchedulerState(enum.Enum):
    NEW = "New"
    REGISTERED = "Registered"
    RECOVERING = "Recovering"
    RUNNING = "Running"
    FAILED = "Failed"


@dataclass(frozen=True)
class RecoveryConfig:
    epoch: int
    scheduler_id: str = "coloc-recover"
    # Nodes in initial sync (snapshot + backlog + ack) at once. A node holds its slot for three round trips;
    # at 32 the client, its gRPC threads and the agents' ends waited on each other: 10,000 replayed nodes
    # cost ~16 % more CPU (client and endpoints) than at 128, which is past the knee (256 no better).
    parallel: int = 128
    lost_after_s: float = 10.0  # per node, without success since its first attempt or its last drop
    rpc_timeout_s: float = 5.0
    watch_idle_s: float = 30.0  # no message (not even a bookmark) for this long (cut by 1.5x it): reconnect
    retry_initial_s: float = 0.05
    retry_max_s: float = 1.0

    def __post_init__(self) -> None:
        if self.epoch < 1:
            raise ValueError(f"epoch: must be ≥ 1, got {self.epoch}")
        if self.parallel < 1:
            raise ValueError(f"parallel: must be ≥ 1, got {self.parallel}")
        if self.lost_after_s <= 0 or self.rpc_timeout_s <= 0 or self.watch_idle_s <= 0:
            raise ValueError("lost_after_s, rpc_timeout_s and watch_idle_s must be > 0")


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    address: str  # "" for the scheduler itself
    node_id: str
    state: str
    detail: str
    totals: dict[str, int]


class Recovery:
    def __init__(self, addresses: list[str], cfg: RecoveryConfig,
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        if not addresses:
            raise ValueError("no agents to recover from")
        self.cfg = cfg
        self.cluster = Cluster(list(dict.fromkeys(addresses)))
        self.state = SchedulerState.NEW
        self.failure = ""
        self._on_progress = on_progress
        self._t0 = time.monotonic()
        self.running_after_s: float | None = None
        self._sem = asyncio.Semaphore(cfg.parallel)
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._done = asyncio.Event()
        self._gc_paused = False
        self._clocks: dict[str, NodeCache] = {}  # nodes whose lost clock runs (the watchdog reads only these)

    # ---- lifecycle ------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _report(self, nc: NodeCache | None, state: str, detail: str = "") -> None:
        self._changed.set()
        if self._on_progress is not None:
            self._on_progress(Progress(self.elapsed(), nc.address if nc else "", nc.node_id if nc else "",
                                       state, detail, self.cluster.totals()))

    def _set_scheduler(self, state: SchedulerState, detail: str = "") -> None:
        self.state = state
        if state is SchedulerState.RUNNING:
            self.running_after_s = self.elapsed()
        if state in (SchedulerState.RUNNING, SchedulerState.FAILED):
            self._done.set()
            self._resume_gc()
        self._report(None, state.value, detail)

    async def start(self) -> None:
        self._t0 = time.monotonic()
        self._pause_gc()
        self._set_scheduler(SchedulerState.REGISTERED, f"{len(self.cluster.nodes)} agents, none schedulable")
        self._set_scheduler(SchedulerState.RECOVERING)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._node_task(nc), name=f"recover {nc.address}")
                       for nc in self.cluster.nodes.values()]
        self._tasks.append(loop.create_task(self._watchdog(), name="recovery watchdog"))

    async def wait_running(self) -> SchedulerState:
        """Until every node is recovered or lost (Running), or the scheduler is fenced (Failed)."""
        await self._done.wait()
        return self.state

    async def wait_for(self, predicate: Callable[[Cluster], bool], timeout: float) -> bool:
        """Keep following the agents until `predicate(cluster)` holds or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while not predicate(self.cluster):
            if self.state is SchedulerState.FAILED:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.1)):
                    await self._changed.wait()
        return True

    def _pause_gc(self) -> None:
        """Until Running: the cyclic collector off. The initial sync builds the cluster's records (a million
        at 10,000 nodes): long-lived and free of cycles, yet each full collection would walk all of them
        again; that cost a fifth of the client's time at 2,000 nodes and grows with the cluster. Running comes
        within a bound (each node is recovered or lost `lost_after_s` after its first attempt); Failed and
        stop() also end the pause."""
        if gc.isenabled():
            gc.disable()
            self._gc_paused = True

    def _resume_gc(self) -> None:
        """The objects made during the pause go straight to the oldest generation (freeze, then unfreeze: no
        walk), where the collector would have moved these long-lived records after walking them twice; a
        cycle among them is still collected by the next full collection."""
        if self._gc_paused:
            self._gc_paused = False
            gc.freeze()
            gc.unfreeze()
            gc.enable()

    async def stop(self) -> None:
        self._resume_gc()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []

    def _fail(self, why: str) -> None:
        if self.state is not SchedulerState.FAILED:
            self.failure = why
            self._set_scheduler(SchedulerState.FAILED, why)
            for t in self._tasks:
                if t is not asyncio.current_task():
                    t.cancel()

    async def _watchdog(self) -> None:
        """Declares nodes lost (each on its own clock: from its first attempt, not while it waits for a
        slot) and the scheduler Running."""
        while True:
            now = self.elapsed()
            late = now - self.cfg.lost_after_s
            for nc in [n for n in self._clocks.values() if n.unhealthy_since is not None
                       and n.unhealthy_since <= late]:
                del self._clocks[nc.address]
                nc.state = NodeState.LOST
                nc.lost_at = now
                self._report(nc, "lost", nc.last_error or "no answer")
            self._check_running()
            await asyncio.sleep(0.05)

    def _check_running(self) -> None:
        if self.state is SchedulerState.RECOVERING and self.cluster.count(NodeState.RECOVERING) == 0:
            self._set_scheduler(SchedulerState.RUNNING)

    # ---- one node -------------------------------------------------------------------------------------

    async def _node_task(self, nc: NodeCache) -> None:
        backoff = self.cfg.retry_initial_s
        # The channel is made once the first attempt has its slot, handed to _sync: made at start for every
        # node (10,000), the channels would hold back the first calls.
        await self._sem.acquire()
        slot = True
        client = AgentClient(nc.address)
        try:
            while True:
                recoveries = nc.recoveries
                if not slot:
                    await self._sem.acquire()
                slot = False  # _sync releases it
                try:
                    await self._sync(client, nc)
                except AgentCallError as err:
                    nc.last_error = f"{err.method}: {err.code.name}: {err.details}"
                    if err.reason == "stale_epoch":
                        self._fail(f"fenced by {nc.address}: {err.details}")
                        return
                    if err.code in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION):
                        nc.resync = True
                        continue
                except ProtocolError as err:
                    nc.last_error = str(err)
                    nc.resync = True
                if nc.recoveries > recoveries:
                    backoff = self.cfg.retry_initial_s  # it was working: reconnect quickly
                if nc.unhealthy_since is None:
                    self._start_clock(nc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.cfg.retry_max_s)
        finally:
            await client.close()

    async def _sync(self, client: AgentClient, nc: NodeCache) -> None:
        """Snapshot (when needed), then watch until the stream ends; returns only by raising. The caller took
        a slot for it, released here once the node is acknowledged (or the attempt fails)."""
        held = True
        if nc.unhealthy_since is None and nc.state is NodeState.RECOVERING:
            self._start_clock(nc)  # its first attempt
        try:
            if nc.resync:
                snap = await client.snapshot_message(timeout=self.cfg.rpc_timeout_s)
                restarted = nc.identity is not None and nc.identity.incarnation != snap.identity.incarnation
                if restarted and nc.state is NodeState.RECOVERED:
                    nc.state = NodeState.RECOVERING
                    self._report(nc, "recovering", "agent restarted (new incarnation): re-snapshot")
                self.cluster.load_snapshot(nc.address, snap)
                nc.resync = False
            stream = client.watch_stream(incarnation=nc.incarnation, from_revision=nc.revision)
            idle = self.cfg.watch_idle_s
            loop = asyncio.get_running_loop()
            try:
                # One deadline for the stream, moved on by a message once less than `idle` is left: a stream
                # is cut after idle to 1.5 x idle without a message, and most messages move nothing (moving
                # it is a timer cancelled and another made). Not wait_for: in 3.11 it can swallow our
                # cancellation when a message arrives at the same moment, and this loop would then never
                # stop.
                async with asyncio.timeout_at(loop.time() + 1.5 * idle) as quiet:
                    while True:
                        batch = await stream.next()
                        now = loop.time()
                        if quiet.when() < now + idle:  # type: ignore[operator]  # never None here
                            quiet.reschedule(now + 1.5 * idle)
                        for item in batch:
                            if isinstance(item, Marker):
                                self.cluster.advance(nc.address, item.revision)
                                if item.initial_sync_end:
                                    quiet.reschedule(None)  # the ack has its own deadline
                                    await self._acknowledge(client, nc)
                                    quiet.reschedule(loop.time() + 1.5 * idle)
                                    if held:
                                        self._sem.release()
                                        held = False
                            else:
                                self.cluster.apply(nc.address, item)
            except TimeoutError:
                raise AgentCallError(nc.address, "Watch", grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"no message for {idle}s") from None
            finally:
                stream.cancel()
        finally:
            if held:
                self._sem.release()

    def _start_clock(self, nc: NodeCache) -> None:
        """The node is declared lost `lost_after_s` from now unless it is recovered first."""
        nc.unhealthy_since = self.elapsed()
        if nc.state is not NodeState.LOST:
            self._clocks[nc.address] = nc

    async def _acknowledge(self, client: AgentClient, nc: NodeCache) -> None:
        await client.ack_recovery(self.cfg.epoch, nc.incarnation, nc.revision,
                                  scheduler_id=self.cfg.scheduler_id, timeout=self.cfg.rpc_timeout_s)
        was = nc.state
        nc.state = NodeState.RECOVERED
        nc.unhealthy_since = None
        self._clocks.pop(nc.address, None)
        nc.last_error = ""
        nc.recoveries += 1
        nc.recovered_at = self.elapsed()
        if was is not NodeState.RECOVERED:
            detail = f"rev {nc.revision}, {len(nc.applications)} apps, {len(nc.allocations)} allocations"
            if was is NodeState.LOST:
                detail += " (was lost)"
            self._report(nc, "recovered", detail)
            self._check_running()
