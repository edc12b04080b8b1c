"""The tick loop: collect → snapshot → policies → actions → execute → record, every interval.

Between ticks a fast path polls the HP tier (its CPU over the last ~100 ms, and PSI stall time where the
kernel has it) and wakes the loop at once when HP load jumps, so suppression reacts well under a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.collect import Collector
from agent.executors.apply import ActionExecutor
from agent.published import ActionRecord, Board, Counters, Published
from qos.actions import Action, Evict
from qos.batch import BatchConfig, BatchState, decide_batch, note_blocked
from qos.model import NodeSnapshot, Resources, Workload
from qos.policies import PolicyConfig, PolicyState, decide, forget_victims
from qos.suppression import bounds

log = logging.getLogger("coloc.loop")

WorkloadLister = Callable[[], tuple[list[Workload], dict[str, str]]]
TickHook = Callable[[NodeSnapshot, Resources | None, list[ActionRecord]], None]
"""Called after each tick with the snapshot, the batch budget (origin) and what was done."""
Planner = Callable[[NodeSnapshot], list[Action]]
"""Contributes actions to a tick beside the policies' (e.g. a drain's DRAIN_TIMEOUT evictions)."""


@dataclass(frozen=True, slots=True)
class LoopTiming:
    interval_s: float
    fast_path: bool
    fast_poll_s: float
    fast_hp_jump_milli_cpu: int
    fast_psi_stall_ratio: float = 0.05
    fast_psi_max_cgroups: int = 32


class TickLoop:
    """Owns the policy state; everything it learns goes out through the Board and the hooks."""

    def __init__(self, collector: Collector, list_workloads: WorkloadLister, executor: ActionExecutor,
                 policy_cfg: PolicyConfig, board: Board, timing: LoopTiming,
                 hooks: tuple[TickHook, ...] = (), sources_synced: Callable[[], bool] = lambda: True,
                 source_ages: Callable[[], dict[str, float]] = dict,
                 on_publish: tuple[Callable[[Published], None], ...] = (),
                 batch: BatchConfig | None = None,
                 origin_annotation: Callable[[], str | None] = lambda: None,
                 admissions_refused: Callable[[], Mapping[str, int]] = dict,
                 planners: tuple[Planner, ...] = ()) -> None:
        self._collector = collector
        self._list = list_workloads
        self._executor = executor
        self._policy_cfg = policy_cfg
        self._policy_state = PolicyState()
        self._board = board
        self._timing = timing
        self._hooks = hooks
        self._sources_synced = sources_synced
        self._source_ages = source_ages
        self._on_publish = on_publish
        self._batch_cfg = batch or BatchConfig(origin="local")
        self._batch_state = BatchState()
        self._origin_annotation = origin_annotation
        self._admissions_refused = admissions_refused
        self._planners = planners
        executor.on_refused = self._eviction_refused
        executor.on_failed = self._eviction_failed
        self._wake = asyncio.Event()
        self._recent: deque[ActionRecord] = deque(maxlen=50)
        self._tick = 0
        self._tick_errors = 0
        self._last: NodeSnapshot | None = None
        self._granted: int | None = None
        self._policy_name = ""
        self.wakeups = 0
        self.psi_wakeups = 0

    @property
    def last_snapshot(self) -> NodeSnapshot | None:
        return self._last

    def tick(self, cause: str = "interval") -> Published:
        """One synchronous pass (cgroup I/O takes microseconds); evictions continue as tasks."""
        started_mono = time.monotonic()
        started_wall = time.time()
        self._tick += 1
        workloads, stale = self._list()
        snap = self._collector.collect(workloads, self._executor.terminating, stale, started_wall)
        actions, self._policy_state = decide(snap, self._policy_cfg, self._policy_state)
        batch_actions, self._batch_state = decide_batch(
            snap, self._batch_cfg, self._batch_state, origin_annotation=self._origin_annotation())
        chosen = {a.key for a in actions if isinstance(a, Evict)}
        actions += [a for a in batch_actions if not (isinstance(a, Evict) and a.key in chosen)]
        for plan in self._planners:
            try:
                extra = plan(snap)
            except Exception:
                log.exception("planner failed")
                continue
            chosen = {a.key for a in actions if isinstance(a, Evict)}
            actions += [a for a in extra if not (isinstance(a, Evict) and a.key in chosen)]
        records = self._execute_sync(actions, snap)
        not_done = {r.target for r in records
                    if r.kind == "evict" and r.outcome in ("skipped", "failed", "protected")}
        self._policy_state = forget_victims(self._policy_state, not_done)
        sup = self._policy_state.suppression
        self._policy_name = self._policy_cfg.suppression.policy
        self._granted = sup.budget_milli
        self._recent.extend(records)
        for hook in self._hooks:
            try:
                hook(snap, self._batch_state.origin, records)
            except Exception:
                log.exception("tick hook failed")
        self._last = snap
        pub = Published(
            tick=self._tick,
            tick_started_at=started_wall,
            tick_monotonic=started_mono,
            tick_duration_s=time.monotonic() - started_mono,
            collect_duration_s=self._collector.last_duration_s,
            interval_s=self._timing.interval_s,
            snapshot=snap,
            be_cpu_granted_milli=self._granted,
            be_cpu_policy=self._policy_name,
            be_cpu_floor_milli=bounds(snap, self._policy_cfg.suppression)[0],
            recent_actions=tuple(self._recent),
            pending_actions=tuple(actions),
            source_age_s=self._source_ages(),
            sources_synced=self._sources_synced(),
            dry_run=self._executor.dry_run,
            counters=Counters(
                ticks=self._tick,
                tick_errors=self._tick_errors,
                evictions=dict(self._executor.evictions),
                eviction_failures=dict(self._executor.eviction_failures),
                holds=dict(self._executor.holds),
                admissions_refused=dict(self._admissions_refused()),
                cgroup_writes=self._executor.cgroup_writes,
                cgroup_write_errors=self._executor.cgroup_write_errors,
            ),
        )
        self._board.publish(pub)
        for observe in self._on_publish:
            try:
                observe(pub)
            except Exception:
                log.exception("publish observer failed")
        if cause != "interval":
            log.debug("tick", extra={"fields": {"cause": cause, "tick": self._tick}})
        return pub

    def _eviction_refused(self, key: str) -> None:
        """The batch policy picks the next victim next tick instead of waiting on this one's release."""
        self._batch_state = note_blocked(self._batch_state, key, time.time())

    def _eviction_failed(self, key: str) -> None:
        """A kill that did not happen is no pending release for the memory and CPU policies either."""
        self._policy_state = forget_victims(self._policy_state, {key})

    def _execute_sync(self, actions: list[Action], snap: NodeSnapshot) -> list[ActionRecord]:
        # execute() awaits nothing for knobs and only spawns tasks for evictions, so it completes in one
        # step; driving it here keeps a tick atomic with respect to other tasks.
        coro = self._executor.execute(actions, snap)
        try:
            coro.send(None)
        except StopIteration as done:
            result: list[ActionRecord] = done.value
            return result
        coro.close()
        raise RuntimeError("executor awaited during a tick")

    async def run(self, stop: asyncio.Event) -> None:
        fast = asyncio.create_task(self._fast_path(stop)) if self._timing.fast_path else None
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.tick("fast" if self._wake.is_set() else "interval")
                except Exception:
                    self._tick_errors += 1
                    log.exception("tick failed")
                self._wake.clear()
                interval = self._timing.interval_s
                if self._last is not None and self._last.hp_usage.milli_cpu is None:
                    # No rates yet (first tick): a second reading soon gives them, so BE is not left
                    # unmanaged for a whole interval after start.
                    interval = min(interval, max(0.1, 2 * self._timing.fast_poll_s))
                remaining = interval - (time.monotonic() - started)
                waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
                await asyncio.wait(waiters, timeout=max(0.0, remaining), return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
        finally:
            if fast is not None:
                fast.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fast

    async def _fast_path(self, stop: asyncio.Event) -> None:
        """Wake the loop when HP work stalls for CPU (PSI, where the kernel has it) or HP CPU over the
        last few polls exceeds what the last tick assumed. PSI is read for at most
        `fast_psi_max_cgroups` HP cgroups (the busiest), to keep a 20 Hz poll cheap on a full node."""
        poll = self._timing.fast_poll_s
        window = max(2 * poll, 0.1)
        last_psi_wake = 0.0
        while not stop.is_set():
            await asyncio.sleep(poll)
            last = self._last
            if last is None or self._wake.is_set():
                continue
            rates = self._collector.poll_tiers(window)
            if rates is None or last.hp_usage.milli_cpu is None:
                continue
            hp_now = rates[0] - rates[1]
            if hp_now - last.hp_usage.milli_cpu > self._timing.fast_hp_jump_milli_cpu:
                self.wakeups += 1
                self._wake.set()
                continue
            hp = sorted(last.hp_workloads, key=lambda w: -(w.usage.milli_cpu or 0.0))
            stall = self._collector.poll_hp_stall([w.cgroup for w in hp[: self._timing.fast_psi_max_cgroups]])
            # Sustained stall (HP already at full CPU, BE already at its floor) must not turn the loop into
            # a 20 Hz one: at most one PSI wake per quarter interval.
            calm = time.monotonic() - last_psi_wake >= self._timing.interval_s / 4
            if stall is not None and stall > self._timing.fast_psi_stall_ratio and calm:
                last_psi_wake = time.monotonic()
                self.psi_wakeups += 1
                self.wakeups += 1
                self._wake.set()
