"""The tick loop: list workloads → snapshot → policy pipeline → execute → hooks and publish, every interval.

Each result goes forward only: the snapshot into the decision, the decision's actions into the executor and
its named outputs (BE's CPU grant, the batch budget, the drain's verdict) into the hooks and the publication,
the executor's records (with the evictions that ended since the last tick) into the hooks, the pipeline's
state for the next tick and the publication.

Between ticks a fast path wakes the loop at once when HP work stalls or its load jumps, so suppression
reacts well under a tick, at little cost to what it protects. Where the kernel allows, HP stalls arrive as
PSI trigger events (`psi-trigger` mode, psi_wake.py) and the HP tier's CPU is read at the calm rate only;
elsewhere (`adaptive-poll`) the tier counters and PSI files are polled: fast for a few seconds after a change
and while BE is busy enough to collide with an HP jump, slowly otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.daemon.collector import Collector
from agent.daemon.psi_wake import ADAPTIVE_POLL, OFF, PSI_TRIGGER, PsiWaker, probe
from agent.executors.apply import ActionExecutor, Ended
from agent.published import NOT_DONE, ActionRecord, Board, Counters, Published
from agent.trace.recorder import TickTrace
from qos.actions import ActionKind
from qos.model import DrainView, NodeSnapshot, Workload
from qos.pipeline import Decision, Pipeline, PipelineState
from qos.registry import NodeOutputs

log = logging.getLogger("coloc.loop")

WorkloadLister = Callable[[], tuple[list[Workload], dict[str, str]]]
TickHook = Callable[[NodeSnapshot, NodeOutputs, list[ActionRecord]], None]
"""Called after each tick with the snapshot, the decision's named outputs and every record of the tick."""
PipelineInForce = Callable[[], Pipeline[NodeOutputs]]
"""The pipeline of the policy settings in force (NodeSLO may change them between ticks; names stay)."""


@dataclass(frozen=True, slots=True)
class LoopTiming:
    interval_s: float
    fast_path: bool
    fast_poll_s: float
    fast_hp_jump_milli_cpu: int
    fast_psi_stall_ratio: float = 0.05
    fast_psi_max_cgroups: int = 16
    psi_trigger: str = ""  # "" = poll only
    calm_poll_s: float = 0.5
    fast_hold_s: float = 3.0


@dataclass(frozen=True, slots=True)
class TickInputs:
    """What a tick reads: the workload sources, the cgroups (collector), and what the policies need beyond
    them (the node's batch annotations, the ledger's drain view), all put into the snapshot."""

    collector: Collector
    list_workloads: WorkloadLister
    origin_annotation: Callable[[], str | None] = lambda: None
    third_party_annotation: Callable[[], str | None] = lambda: None
    drain_view: Callable[[NodeSnapshot], DrainView | None] = lambda _snap: None
    sources_synced: Callable[[], bool] = lambda: True
    source_ages: Callable[[], dict[str, float]] = dict
    usage_report_age: Callable[[], float | None] = lambda: None  # our last NodeMetric write (issue 13)
    settings_sources: Callable[[], Mapping[str, str]] = dict  # setting -> "default" | "yaml" | "NodeSLO"

    def snapshot(self, snap: NodeSnapshot) -> NodeSnapshot:
        """The collected snapshot with the ledger's and the API server's parts filled in."""
        try:
            drain = self.drain_view(snap)
        except Exception:
            log.exception("reading the drain view failed")
            drain = None
        return dataclasses.replace(snap, origin_annotation=self.origin_annotation(),
                                   third_party_annotation=self.third_party_annotation(), drain=drain,
                                   usage_report_age_s=self.usage_report_age())


@dataclass(frozen=True, slots=True)
class TickOutputs:
    """Where a tick's results go: the board readers see, hooks after the tick (the ledger first), and
    observers of each publication (metrics)."""

    board: Board
    hooks: tuple[TickHook, ...] = ()
    observers: tuple[Callable[[Published], None], ...] = ()
    admissions_refused: Callable[[], Mapping[str, int]] = field(default=dict)
    trace: Callable[[TickTrace], None] | None = None  # the trace's recorder (agent/trace), when on


def _settle(pipeline: Pipeline[NodeOutputs], state: PipelineState, ended: Ended) -> PipelineState:
    """Evictions that ended since the last tick: a kill that did not happen is no pending release for any
    policy, and one refused with "try the next victim" lets the batch policy pick the next one now."""
    state = pipeline.forget(state, ended.failed)
    at = {r.target: r.at for r in ended.records}
    for key in sorted(ended.try_next):
        state = pipeline.refused(state, key, at.get(key, time.time()))
    return state


class TickLoop:
    """Owns the policies' state; everything it learns goes out through the outputs."""

    def __init__(self, inputs: TickInputs, pipeline: PipelineInForce, executor: ActionExecutor,
                 outputs: TickOutputs, timing: LoopTiming) -> None:
        self._inputs = inputs
        self._collector = inputs.collector
        self._pipeline = pipeline
        self._state = pipeline().initial_state()
        self._executor = executor
        self._outputs = outputs
        self._timing = timing
        self._wake = asyncio.Event()
        self._recent: deque[ActionRecord] = deque(maxlen=50)  # what `status` and `top` show
        self._tick = 0
        self._tick_errors = 0
        self._last: NodeSnapshot | None = None
        self.wakeups = 0
        self.psi_wakeups = 0
        self.mode = OFF if not timing.fast_path else ADAPTIVE_POLL
        self.mode_reason = "" if timing.fast_path else "loop.fast_path is false"
        self.waker: PsiWaker | None = None
        self._last_change = 0.0  # monotonic time of the last HP jump, PSI event or budget cut
        self._last_psi_wake = 0.0
        self._last_granted: int | None = None
        self._next_tick_at: float | None = None  # monotonic; the fast path's polls fall on its grid

    @property
    def last_snapshot(self) -> NodeSnapshot | None:
        return self._last

    def tick(self, cause: str = "interval") -> Published:
        """One synchronous pass (cgroup I/O takes microseconds); evictions continue as tasks."""
        started_mono = time.monotonic()
        started_wall = time.time()
        self._tick += 1
        pipeline = self._pipeline()
        ended = self._executor.ended()
        prior = self._state
        self._state = _settle(pipeline, self._state, ended)
        workloads, stale = self._inputs.list_workloads()
        collected = self._collector.collect(workloads, self._executor.terminating, stale, started_wall)
        snap = self._inputs.snapshot(collected)
        decision = pipeline.decide(snap, self._state)
        done = self._executor.execute(decision.actions, snap)
        not_done = {r.target for r in done if r.kind == ActionKind.EVICT and r.outcome in NOT_DONE}
        self._state = pipeline.forget(decision.state, not_done)
        if self._outputs.trace is not None:
            try:
                self._outputs.trace(TickTrace(self._tick, started_wall, prior, ended.records, ended.try_next,
                                              snap, decision, done, not_done, self._inputs.source_ages()))
            except Exception:
                log.exception("recording the tick failed")
        records = [*ended.records, *done]
        self._recent.extend(records)
        for hook in self._outputs.hooks:
            try:
                hook(snap, decision.outputs, records)
            except Exception:
                log.exception("tick hook failed")
        self._last = snap
        pub = self._publication(snap, decision, records, started_wall, started_mono)
        self._note_budget(pub.be_cpu_granted_milli)
        self._outputs.board.publish(pub)
        for observe in self._outputs.observers:
            try:
                observe(pub)
            except Exception:
                log.exception("publish observer failed")
        if cause != "interval":
            log.debug("tick", extra={"fields": {"cause": cause, "tick": self._tick}})
        return pub

    def _publication(self, snap: NodeSnapshot, decision: Decision[NodeOutputs], records: list[ActionRecord],
                     started_wall: float, started_mono: float) -> Published:
        grant = decision.outputs.be_cpu
        ex = self._executor
        journal = ex.journal
        return Published(
            tick=self._tick,
            tick_started_at=started_wall,
            tick_monotonic=started_mono,
            tick_duration_s=time.monotonic() - started_mono,
            collect_duration_s=self._collector.last_duration_s,
            interval_s=self._timing.interval_s,
            snapshot=snap,
            be_cpu_granted_milli=grant.granted_milli,
            be_cpu_policy=grant.policy,
            be_cpu_floor_milli=grant.floor_milli,
            recent_actions=tuple(self._recent),
            actions=tuple(records),
            pending_actions=tuple(decision.actions),
            source_age_s=self._inputs.source_ages(),
            sources_synced=self._inputs.sources_synced(),
            settings_sources=dict(self._inputs.settings_sources()),
            dry_run=ex.dry_run,
            fast_path_mode=self.mode,
            fast_path_reason=self.mode_reason,
            counters=Counters(
                ticks=self._tick,
                tick_errors=self._tick_errors,
                evictions=dict(ex.evictions),
                eviction_failures=dict(ex.eviction_failures),
                holds=dict(ex.holds),
                admissions_refused=dict(self._outputs.admissions_refused()),
                cgroup_writes=ex.cgroup_writes,
                cgroup_write_errors=ex.cgroup_write_errors,
                knob_overrides=ex.override_counts,
                systemd_sets=ex.systemd_counts[0],
                systemd_errors=ex.systemd_counts[1],
                journal_writes=journal.stats.writes,
                holdings=dict(journal.holders()),
                given_back=dict(journal.stats.given_back),
                left_to_others=dict(journal.stats.left),
            ),
            knob_overrides=tuple(ex.overrides),
        )

    def _note_budget(self, granted: int | None) -> None:
        """A big move of BE's budget (a cut or a regrowth step) keeps the fast path fast for a while."""
        prev, self._last_granted = self._last_granted, granted
        jump = self._timing.fast_hp_jump_milli_cpu
        if prev is not None and granted is not None and abs(granted - prev) > jump:
            self._last_change = time.monotonic()

    async def run(self, stop: asyncio.Event) -> None:
        if self._timing.fast_path:
            self._start_waker()  # before the first tick: its publication carries the mode in force
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
                self._next_tick_at = started + interval
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
            if self.waker is not None:  # a fast path cancelled before it first ran did not close it
                self.waker.close()
                self.waker = None

    def _start_waker(self) -> None:
        """Use PSI triggers when the kernel takes the configured one on the root's cgroup2 cpu.pressure."""
        spec = self._timing.psi_trigger
        root_file = self._collector.pressure_file("")
        if not spec:
            why = "loop.psi_trigger is empty"
        elif root_file is None:
            why = "no cgroup2 cpu.pressure for the cgroup root"
        else:
            why = probe(root_file, spec)
        if why:
            self.mode, self.mode_reason = ADAPTIVE_POLL, why
            log.info("fast path polls: %s", why)
            return
        self.waker = PsiWaker(asyncio.get_running_loop(), spec, self._on_psi)
        self.mode, self.mode_reason = PSI_TRIGGER, ""

    def wake(self) -> None:
        """A tick now (the disk guard saw HP start waiting for IO, or go idle)."""
        if not self._wake.is_set():
            self.wakeups += 1
            self._wake.set()

    def _on_psi(self) -> None:
        """A PSI event: HP stalled. A sustained stall (HP already at full CPU, BE at its floor) must not
        turn the loop into a fast one: at most one wake per quarter interval."""
        now = time.monotonic()
        self._last_change = now
        if self._wake.is_set() or now - self._last_psi_wake < self._timing.interval_s / 4:
            return
        self._last_psi_wake = now
        self.psi_wakeups += 1
        self.wakeups += 1
        self._wake.set()

    def _sync_triggers(self, last: NodeSnapshot) -> None:
        """Triggers follow the busiest HP cgroups, re-registered as HP workloads come and go."""
        assert self.waker is not None
        hp = sorted(last.hp_workloads, key=lambda w: -(w.usage.milli_cpu or 0.0))
        paths = [self._collector.pressure_file(w.cgroup) for w in hp[: self._timing.fast_psi_max_cgroups]]
        self.waker.sync([p for p in paths if p is not None])

    def _poll_period(self) -> float:
        """Fast for `fast_hold_s` after a change; without PSI events also while BE uses more CPU than an HP
        jump's worth (an HP jump would then collide with it and only a poll can see it); calm otherwise."""
        t = self._timing
        if time.monotonic() - self._last_change < t.fast_hold_s:
            return t.fast_poll_s
        last = self._last
        be_cpu = last.be_usage.milli_cpu if last is not None else None
        if be_cpu is None:  # no rates yet (start): the first readings decide
            return t.fast_poll_s
        if self.waker is None and be_cpu > t.fast_hp_jump_milli_cpu:
            return t.fast_poll_s
        return min(t.calm_poll_s, t.interval_s)

    def _poll_delay(self, period: float) -> float:
        """Seconds to the next poll: on a `period` grid through the next tick's deadline, at least half a
        period away, and never at the tick itself (which reads everything anyway). Calm, a poll then falls
        midway between ticks, and the agent wakes twice a second, not three times."""
        tick_at = self._next_tick_at
        if tick_at is None:
            return period
        now = time.monotonic()
        delay = (tick_at - now) % period
        while delay < period / 2 or abs(now + delay - tick_at) < 1e-3:
            delay += period
        return delay

    async def _fast_path(self, stop: asyncio.Event) -> None:
        """Wake the loop when HP CPU over the last poll period exceeds what the last tick assumed, or HP
        stalls for CPU: a PSI event in `psi-trigger` mode, PSI files read at each poll otherwise (for at most
        `fast_psi_max_cgroups` HP cgroups, the busiest)."""
        synced = -1
        try:
            while not stop.is_set():
                period = self._poll_period()
                await asyncio.sleep(self._poll_delay(period))
                last = self._last
                if last is None or self._wake.is_set():
                    continue
                if self.waker is not None and synced != self._tick:
                    synced = self._tick
                    self._sync_triggers(last)
                rates = self._collector.poll_tiers(max(period, 0.1))
                if rates is None or last.hp_usage.milli_cpu is None:
                    continue
                if rates[0] - rates[1] - last.hp_usage.milli_cpu > self._timing.fast_hp_jump_milli_cpu:
                    self._last_change = time.monotonic()
                    self.wakeups += 1
                    self._wake.set()
                    continue
                if self.waker is None:
                    self._poll_stall(last)
        finally:
            if self.waker is not None:
                self.waker.close()
                self.waker = None

    def _poll_stall(self, last: NodeSnapshot) -> None:
        hp = sorted(last.hp_workloads, key=lambda w: -(w.usage.milli_cpu or 0.0))
        stall = self._collector.poll_hp_stall([w.cgroup for w in hp[: self._timing.fast_psi_max_cgroups]])
        if stall is not None and stall > self._timing.fast_psi_stall_ratio:
            self._on_psi()
