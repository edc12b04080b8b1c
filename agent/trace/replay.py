"""Replay: a trace's snapshots through the same policies, with the settings it was recorded under or others.

Each tick does what the loop does (`agent/daemon/loop.py`), in the same order and with the same pipeline
calls: settle the evictions that ended since the last tick (`forget` the failed ones, `refused` the ones
whose evictor asked for the next victim), `decide` on the recorded snapshot, then `forget` the victims whose
eviction did not happen. What happened to an eviction is the executor's, not the policies': an eviction
the recording also made at that tick had the outcome it had; one only the replay makes goes through the
executor's guards as `agent/executors/apply.py` applies them (stale data, protected, gone, not BE, cool-down,
rate limit, dry run), on the snapshot's clock, and is taken to succeed. Admissions judged between ticks are
judged again by the one rule (`qos.admission`) on the replay's batch budget, with the other facts recorded.

What a replay cannot know: how the node would have moved had the agent acted differently. The snapshots are
what really happened (a workload the replay evicts but the agent did not stays in them, its usage too).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.trace.codec import TraceError, WorkloadReader, decode, encode, snapshot_of
from agent.trace.files import read_lines, trace_files
from agent.trace.params import EvictionGuards, TickSettings
from qos import admission
from qos.actions import Action, Evict, Hold
from qos.admission import AdmissionFacts, BatchBudget
from qos.model import NodeSnapshot
from qos.pipeline import Pipeline, PipelineState
from qos.registry import NodeOutputs

STARTED, DRY_RUN, SKIPPED, PROTECTED, FAILED = "started", "dry_run", "skipped", "protected", "failed"
NOT_DONE = frozenset({SKIPPED, FAILED, PROTECTED})


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a trace: one file, or every trace file of a directory, oldest first."""
    files = trace_files(path) if path.is_dir() else [path]
    if not files:
        raise TraceError(f"{path}: no trace files (trace-*.ctr) in it")
    for f in files:
        for line in read_lines(f):
            try:
                rec = json.loads(line)
            except ValueError as err:
                raise TraceError(f"{f}: a record is not JSON: {err}") from None
            if not isinstance(rec, dict) or "k" not in rec:
                raise TraceError(f"{f}: a record without a kind")
            yield rec


@dataclass(slots=True)
class Run:
    """What one run (the recording, or the replay) did over the trace."""

    ticks: int = 0
    grants: list[int | None] = field(default_factory=list)  # BE's CPU grant per tick, milli-cores
    batch_cpu: list[int | None] = field(default_factory=list)  # batch allocatable CPU per tick, milli-cores
    core_s: float = 0.0  # BE CPU granted over time, core-seconds
    cuts: int = 0  # ticks at which BE's CPU grant was cut
    evictions: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    admitted: int = 0
    holds: dict[str, int] = field(default_factory=dict)

    def grant(self, milli: int | None, dt: float) -> None:
        last = self.grants[-1] if self.grants else None
        if milli is not None and last is not None and milli < last:
            self.cuts += 1
        if milli is not None:
            self.core_s += milli / 1000 * dt
        self.grants.append(milli)

    def summary(self) -> dict[str, Any]:
        known = [g for g in self.grants if g is not None]
        batch = [b for b in self.batch_cpu if b is not None]
        return {
            "ticks": self.ticks,
            "be_budget_mean_milli": round(sum(known) / len(known), 1) if known else None,
            "be_cpu_core_s": round(self.core_s, 1),
            "be_budget_cuts": self.cuts,
            "evictions": len(self.evictions),
            "admissions_refused": len(self.refused),
            "admissions_accepted": self.admitted,
            "batch_allocatable_mean_milli": round(sum(batch) / len(batch), 1) if batch else None,
            "holds": dict(sorted(self.holds.items())),
        }


@dataclass(slots=True)
class _Guards:
    """The executor's guards on evictions only the replay makes, on the snapshot's clock."""

    guards: EvictionGuards
    tokens: float = 0.0
    at: float | None = None
    recently: dict[str, float] = field(default_factory=dict)

    def outcome(self, a: Evict, snap: NodeSnapshot) -> str:
        w = snap.workload(a.key)
        now = snap.taken_at
        if w is not None and w.protected:
            return PROTECTED
        if snap.stale or w is None or not w.be:
            return SKIPPED
        if now - self.recently.get(a.key, -1e18) < self.guards.cooldown_s:
            return SKIPPED
        if self.guards.dry_run:
            return DRY_RUN
        if not self.take(now):
            return SKIPPED
        self.recently[a.key] = now
        return STARTED

    def take(self, now: float) -> bool:
        g = self.guards
        if self.at is None:
            self.tokens, self.at = float(g.burst), now
        elif now > self.at:
            self.tokens = min(float(g.burst), self.tokens + (now - self.at) * g.rate_per_s)
            self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def started(self, key: str, now: float) -> None:
        """An eviction the recording started: it used a token and starts its cool-down here too."""
        self.take(now)
        self.recently[key] = now


Override = Callable[[TickSettings], TickSettings]


@dataclass(slots=True)
class Replay:
    """Replays a trace (`run`), keeping the recorded run's and the replay's figures side by side."""

    override: Override | None = None  # the replay's settings from the recorded ones (None: the recorded)
    recorded: Run = field(default_factory=Run)
    replayed: Run = field(default_factory=Run)
    differing: int = 0  # ticks whose actions or outputs differ from the recorded ones
    first_difference: dict[str, Any] | None = None
    restarts: int = 0  # files that did not follow on from the tick before (an agent restart, lost ticks)
    series_at: list[float] = field(default_factory=list)
    first_recorded: TickSettings | None = None  # the settings the trace begins with
    _settings: TickSettings | None = None
    _pipeline: Pipeline[NodeOutputs] | None = None
    _state: PipelineState | None = None
    _guards: _Guards | None = None
    _budget: BatchBudget | None = None
    _last_n: int | None = None
    _last_at: float | None = None
    _workloads: WorkloadReader = field(default_factory=WorkloadReader)
    _rest: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # the snapshot's fields, last decoded

    def run(self, recs: Iterable[dict[str, Any]]) -> Replay:
        for n, rec in enumerate(recs):
            try:
                self._record(rec)
            except TraceError:
                raise
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
                raise TraceError(f"record {n} ({rec.get('k')!r}, tick {rec.get('n', rec.get('tick'))}) "
                                 f"cannot be replayed: {type(err).__name__}: {err}") from None
        if self.recorded.ticks == 0:
            raise TraceError("the trace holds no complete tick")
        return self

    def _record(self, rec: dict[str, Any]) -> None:
        kind = rec["k"]
        if kind == "tick":
            self._tick(rec)
        elif kind == "head":
            self._head(rec)
        elif kind == "set":
            self._use(decode(rec["settings"]))

    def _use(self, recorded: TickSettings) -> None:
        if not isinstance(recorded, TickSettings):
            raise TraceError("the trace's settings are not a TickSettings")
        if self.first_recorded is None:
            self.first_recorded = recorded
        settings = recorded if self.override is None else self.override(recorded)
        if settings != self._settings:
            self._settings = settings
            self._pipeline = settings.pipeline()
            if self._guards is None:
                self._guards = _Guards(settings.guards)
            else:
                self._guards.guards = settings.guards

    def _head(self, rec: dict[str, Any]) -> None:
        if rec.get("v") != 1:
            raise TraceError(f"trace version {rec.get('v')!r}; this agent reads version 1")
        self._workloads.reset()
        self._use(decode(rec["settings"]))
        if self._state is None or self._last_n is None or rec["tick"] != self._last_n + 1:
            if self._state is not None:
                self.restarts += 1
            state = decode(rec["state"])
            if not isinstance(state, PipelineState):
                raise TraceError("the trace's policy state is not a PipelineState")
            self._state = state

    def _tick(self, rec: dict[str, Any]) -> None:
        pipeline, state, guards = self._pipeline, self._state, self._guards
        if pipeline is None or state is None or guards is None:
            return  # ticks before the first header (a file cut at its start) cannot be replayed
        # the loop's `_settle`: what ended since the last tick
        failed = frozenset(t for t, outcome, _at in rec["end"] if outcome == FAILED)
        state = pipeline.forget(state, failed)
        at = {t: when for t, _o, when in rec["end"]}
        for key in rec["next"]:
            state = pipeline.refused(state, key, at.get(key, rec["at"]))
        self._admissions(rec)
        snap = snapshot_of(rec["snap"], self._workloads.workloads(rec["defs"], rec["rows"]), self._rest)
        decision = pipeline.decide(snap, state)
        recorded_done = {(kind, target): outcome for _p, kind, target, outcome in rec["done"]}
        not_done: set[str] = set()
        for a in decision.actions:
            if isinstance(a, Evict):
                outcome = self._evict_outcome(a, snap, recorded_done, guards)
                if outcome in NOT_DONE:
                    not_done.add(a.key)
                elif outcome in (STARTED, DRY_RUN):
                    self.replayed.evictions.append(_eviction(rec, a, outcome))
            elif isinstance(a, Hold):
                self.replayed.holds[a.code.value] = self.replayed.holds.get(a.code.value, 0) + 1
        self._state = pipeline.forget(decision.state, not_done)
        self._budget = decision.outputs.batch_budget
        self._figures(rec, snap, decision.actions, decision.outputs)
        self._last_n = rec["n"]

    def _evict_outcome(self, a: Evict, snap: NodeSnapshot, recorded: dict[tuple[str, str], str],
                       guards: _Guards) -> str:
        outcome = recorded.get(("evict", a.key))
        if outcome is None:
            return guards.outcome(a, snap)
        if outcome == STARTED:
            guards.started(a.key, snap.taken_at)
        return outcome

    def _admissions(self, rec: dict[str, Any]) -> None:
        for req_x, facts_x, verdict_x in rec["adm"]:
            request, facts, verdict = decode(req_x), decode(facts_x), decode(verdict_x)
            self._count_admission(self.recorded, verdict, rec)
            if self._budget is not None and isinstance(facts, AdmissionFacts):
                facts = dataclasses.replace(facts, budget=self._budget)
            self._count_admission(self.replayed, admission.admit(request, facts), rec)

    @staticmethod
    def _count_admission(run: Run, verdict: admission.Admission, rec: dict[str, Any]) -> None:
        if verdict.accepted:
            run.admitted += 1
        else:
            run.refused.append({"tick": rec["n"], "at": rec["at"], "reason": verdict.reason,
                                "refusal": verdict.refusal.value if verdict.refusal else None})

    def _figures(self, rec: dict[str, Any], snap: NodeSnapshot, actions: list[Action],
                 outputs: NodeOutputs) -> None:
        dt = snap.interval_s if self._last_at is None else max(0.0, rec["at"] - self._last_at)
        self._last_at = rec["at"]
        self.series_at.append(rec["at"])
        # the recorded decision is decoded only where it differs from the replayed one
        same_out = encode(outputs) == rec["out"]
        same_actions = encode(actions) == rec["act"]
        rec_out: NodeOutputs = outputs if same_out else decode(rec["out"])
        for run, out in ((self.recorded, rec_out), (self.replayed, outputs)):
            run.ticks += 1
            run.grant(out.be_cpu.granted_milli, dt)
            allocatable = out.batch_budget.allocatable
            run.batch_cpu.append(None if allocatable is None else allocatable.milli_cpu)
        rec_actions = actions if same_actions else decode(rec["act"])
        messages = {a.key: a for a in rec_actions if isinstance(a, Evict)}
        for _p, kind, target, outcome in rec["done"]:
            if kind == "evict" and outcome in (STARTED, DRY_RUN) and target in messages:
                self.recorded.evictions.append(_eviction(rec, messages[target], outcome))
        for a in rec_actions:
            if isinstance(a, Hold):
                self.recorded.holds[a.code.value] = self.recorded.holds.get(a.code.value, 0) + 1
        if not (same_actions and same_out):
            self.differing += 1
            if self.first_difference is None:
                self.first_difference = {"tick": rec["n"], "recorded": rec["act"],
                                         "replayed": encode(actions)}


def _eviction(rec: dict[str, Any], a: Evict, outcome: str) -> dict[str, Any]:
    return {"tick": rec["n"], "at": rec["at"], "key": a.key, "reason": a.reason.value, "why": a.message,
            "outcome": outcome}
