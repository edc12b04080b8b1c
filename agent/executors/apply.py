"""Carry out a tick's actions: knobs through the cgroup writer, evictions through the evictor of their source.

Evictions are the dangerous part, so this is where the last guards sit, whatever a policy said: never on a
stale snapshot, never an HP workload, never twice in flight, at most the token bucket's rate, and under
`dry_run` only recorded. `execute` is synchronous: knobs are written at once, and each eviction that
passes the guards is handed to a task (a grace period is seconds long), so it needs a running event loop.
The keys stay `terminating` until the kill is confirmed, so the policies count those releases as pending
and never over-evict. How each eviction ended (done or failed) comes back as its record through `ended`,
which the loop reads at the start of its next tick: every outcome reaches what the loop publishes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agent.executors.be_knobs import BE_CPU, BeKnobs, IdleRefused
from agent.executors.ratelimit import TokenBucket
from agent.published import ActionRecord, KnobOverride, Outcome
from cgroups.errors import CgroupError
from cgroups.holdings import Journal
from cgroups.writer import CgroupWriter
from qos.actions import (
    Action,
    ActionKind,
    Evict,
    Hold,
    HoldReason,
    SetBeCpuIdle,
    SetBeCpuQuota,
    SetBeCpuset,
    SetBeEgressCeiling,
    SetBeEgressSources,
    SetBeIoLimit,
)
from qos.membership import Membership, tier_level
from qos.model import NodeSnapshot, Source, Workload

if TYPE_CHECKING:
    from agent.executors.htb import EgressShaper
    from agent.executors.io_guard import IoGuard

log = logging.getLogger("coloc.executor")

CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 2_000
SETTLE_AFTER_TICKS = 5  # fresh ticks without a BE knob decided: suppression is off, what was left goes


@dataclass(frozen=True, slots=True)
class Ended:
    """Evictions that ended since the last `ActionExecutor.ended`: their records (done or failed), and the
    failed ones whose evictor asked for the next victim instead (`try_next`)."""

    records: tuple[ActionRecord, ...] = ()
    try_next: frozenset[str] = frozenset()

    @property
    def failed(self) -> frozenset[str]:
        """Victims whose eviction did not happen."""
        return frozenset(r.target for r in self.records if r.outcome == Outcome.FAILED)


@dataclass(frozen=True, slots=True)
class EvictOutcome:
    ok: bool
    detail: str
    try_next: bool = False  # e.g. a PodDisruptionBudget said no: the next victim may be taken


class Evictor(Protocol):
    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome: ...


AuditSink = Callable[[ActionRecord], None]


class ActionExecutor:
    """Applies actions; owns the rate limit, the in-flight set and the counters of what it did."""

    def __init__(
        self,
        writer: CgroupWriter,
        be_tier: str,
        evictors: Mapping[Source, Evictor],
        *,
        dry_run: bool,
        rate_per_s: float,
        burst: int,
        recheck_cooldown_s: float,
        audit: AuditSink,
        now: float,
        tier_owned: bool,
        network: EgressShaper | None = None,
        io: IoGuard | None = None,
    ) -> None:
        self._writer = writer
        self._be_tier = be_tier
        self._be = BeKnobs(writer, be_tier, CFS_PERIOD_US, MIN_QUOTA_US, tier_owned=tier_owned)
        self._refused_idle = False
        self.overrides: deque[KnobOverride] = deque(maxlen=16)
        self._ok_at: dict[str, float] = {}  # knob -> when a tick last read it at the wanted value
        self._dry_last: dict[str, str] = {}  # knob kind -> the last dry-run target recorded
        self._evictors = evictors
        self.dry_run = dry_run
        self._bucket = TokenBucket(rate_per_s, burst, now)
        self._cooldown_s = recheck_cooldown_s
        self._audit = audit
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._recently: dict[str, float] = {}
        self.evictions: Counter[tuple[str, str]] = Counter()
        self.eviction_failures: Counter[str] = Counter()
        # (policy, code) -> holds: keyed by the code, a fixed set, never by the hold's free text
        self.holds: Counter[tuple[str, HoldReason]] = Counter()
        self._holding: set[tuple[str, HoldReason]] = set()  # the holds of the last tick
        self.cgroup_write_errors = 0
        self._ended: list[ActionRecord] = []  # evictions that ended since `ended` was last read
        self._try_next: set[str] = set()
        self._network = network  # BE egress actions go here (when network control is on)
        self._io = io  # BE disk IO actions go here (when the disk guard runs)
        self._fresh_ticks = 0  # ticks on fresh data before suppression decided (see `_decided`)

    @property
    def be_tier(self) -> str:
        return self._be_tier

    @property
    def journal(self) -> Journal:
        """What the agent holds on the node (cgroups/holdings.py), for the counters."""
        return self._writer.journal

    @property
    def cgroup_writes(self) -> int:
        return self._writer.stats.writes

    def ended(self) -> Ended:
        """The evictions that ended since the last call, oldest first; each is reported once."""
        out = Ended(tuple(self._ended), frozenset(self._try_next))
        self._ended.clear()
        self._try_next.clear()
        return out

    @property
    def terminating(self) -> frozenset[str]:
        """Keys whose eviction is in flight: the collector marks them `terminating`."""
        return frozenset(self._in_flight)

    def _record(self, policy: str, kind: str, target: str, outcome: Outcome, reason: str,
                numbers: Mapping[str, float] | None = None) -> ActionRecord:
        rec = ActionRecord(time.time(), policy, kind, target, outcome, reason, dict(numbers or {}))
        self._audit(rec)
        return rec

    @property
    def systemd_counts(self) -> tuple[int, int]:
        """(knobs set through systemd, systemd calls that failed)."""
        st = self._writer.stats
        return st.systemd_sets, st.systemd_errors

    @property
    def override_counts(self) -> dict[tuple[str, str], int]:
        return dict(self._writer.override_counts)

    def _watch_overrides(self, snapshot: NodeSnapshot, before: int) -> None:
        """Stamp this tick's re-asserts with how long the knob was off; note when the tier read right."""
        now, wall = time.monotonic(), time.time()
        fresh = self._writer.stats.reasserted - before
        for ev in list(self._writer.overrides)[-fresh:] if fresh > 0 else []:
            ok = self._ok_at.get(ev.knob)
            self.overrides.append(KnobOverride(wall, ev.knob, ev.cgroup, ev.writer, ev.found, ev.wanted,
                                               None if ok is None else round(now - ok, 3)))
        tier = snapshot.be_tier
        if self._be.cpuset is not None and set(tier.cpuset) == set(self._be.cpuset):
            self._ok_at["cpuset"] = now

    def execute(self, actions: Sequence[Action], snapshot: NodeSnapshot) -> list[ActionRecord]:
        """Carry out one tick's actions; evictions that pass the guards continue as tasks."""
        before = self._writer.stats.reasserted
        try:
            return self._execute(actions, snapshot)
        finally:
            self._watch_overrides(snapshot, before)

    def _execute(self, actions: Sequence[Action], snapshot: NodeSnapshot) -> list[ActionRecord]:
        records: list[ActionRecord] = []
        members = self._be.decide(snapshot)
        with self._writer.held_by(BE_CPU):
            self._knobs(actions, snapshot, members, records)
        if not snapshot.stale and not self.dry_run and self._decided(actions):
            records.extend(self._released_left())
        if self._io is not None and not self.dry_run and snapshot.io is not None:
            self._io.follow()
            self._io.settle_left()
        return records

    def _decided(self, actions: Sequence[Action]) -> bool:
        """Whether suppression has decided BE's CPU budget: it set the cpuset or the quota (this tick or
        before), or `SETTLE_AFTER_TICKS` ticks on fresh data went by without either (it is off). Until then,
        what an earlier run left on the tier stays: suppression's first ticks have no CPU rates to decide on
        (`cpu.idle` comes at once: it is not the budget)."""
        if any(isinstance(a, SetBeCpuset | SetBeCpuQuota) for a in actions):
            self._fresh_ticks = SETTLE_AFTER_TICKS
        self._fresh_ticks += 1
        return self._fresh_ticks > SETTLE_AFTER_TICKS

    def _hold(self, action: Hold, holding: set[tuple[str, HoldReason]]) -> None:
        """Count a hold by its code; a hold that begins (not held the tick before) is audited and logged with
        its words and numbers, which are never a label value."""
        key = (action.policy, action.code)
        self.holds[key] += 1
        holding.add(key)
        if key not in self._holding:
            self._audit(ActionRecord(time.time(), action.policy, "hold", str(action.code), Outcome.SKIPPED,
                                     action.reason, {}))

    def _knobs(self, actions: Sequence[Action], snapshot: NodeSnapshot, members: Membership,
               records: list[ActionRecord]) -> None:
        holding: set[tuple[str, HoldReason]] = set()
        for action in actions:
            if isinstance(action, Hold):
                self._hold(action, holding)
                continue
            if isinstance(action, Evict):
                records.append(self._evict(action, snapshot))
            elif isinstance(action, SetBeEgressCeiling | SetBeEgressSources):
                if self._network is not None:
                    records.append(self._network.submit(action, self.dry_run, self._record))
            elif isinstance(action, SetBeIoLimit):
                if self._io is not None and (rec := self._io.submit(action, self.dry_run, self._record)):
                    records.append(rec)
            else:
                rec = self._knob(action, members)
                if rec is not None:
                    records.append(rec)
        self._holding = holding
        if not self.dry_run:
            records.extend(self._follow(members))

    def _knob(self, action: Action, members: Membership) -> ActionRecord | None:
        """Apply one knob on the BE knobs' members; record it only when it changed something (or failed).

        Under dry run a knob is recorded once per change of its target: nothing is written, so the policy
        re-asserts it every tick, and each of those would otherwise be another record."""
        try:
            if isinstance(action, SetBeCpuset):
                kind, numbers = ActionKind.SET_BE_CPUSET, action.numbers
                target = ",".join(map(str, action.cpus))
                if self.dry_run:
                    return self._dry("suppression", kind, target, action.reason, numbers)
                changed = self._apply_cpuset(action.cpus, members)
            elif isinstance(action, SetBeCpuQuota):
                kind, numbers = ActionKind.SET_BE_CPU_QUOTA, action.numbers
                quota = None if action.milli_cpu is None else max(
                    MIN_QUOTA_US, action.milli_cpu * CFS_PERIOD_US // 1000)
                target = "max" if quota is None else str(quota)
                if self.dry_run:
                    return self._dry("suppression", kind, target, action.reason, numbers)
                changed = self._be.set_quota(quota, members)
            elif isinstance(action, SetBeCpuIdle):
                kind, target, numbers = ActionKind.SET_BE_CPU_IDLE, str(int(action.idle)), {}
                if action.idle and not self._be.tier_owned:
                    return self._idle_refused(action)
                if self.dry_run:
                    return self._dry("suppression", kind, target, action.reason, numbers)
                changed = self._be.set_idle(action.idle, members)
            else:  # pragma: no cover - the Action union is closed
                raise TypeError(f"unknown action {action!r}")
        except CgroupError as err:
            self.cgroup_write_errors += 1
            log.warning("cgroup write failed", extra={"fields": {"action": repr(action), "error": str(err)}})
            return self._record("suppression", type(action).__name__, self._be_tier, Outcome.FAILED, str(err))
        if not changed:
            return None
        reason = action.reason
        if members.split:
            reason, numbers = self._split_note(reason, numbers, members)
        return self._record("suppression", kind, target, Outcome.APPLIED, reason, numbers)

    def _idle_refused(self, action: SetBeCpuIdle) -> ActionRecord | None:
        """The coexistence rule (be_knobs.py): recorded and logged once, counted every time."""
        self.holds[("suppression", HoldReason.CPU_IDLE_ON_KUBELET_TIER)] += 1
        if self._refused_idle:
            return None
        self._refused_idle = True
        try:
            self._be.set_idle(True, tier_level(self._be_tier))
        except IdleRefused as err:
            log.warning("cpu.idle refused", extra={"fields": {"tier": self._be_tier, "why": str(err)}})
            return self._record("suppression", ActionKind.SET_BE_CPU_IDLE, self._be_tier, Outcome.SKIPPED,
                                f"{err} ({action.reason})")
        return None  # pragma: no cover - set_idle refuses whenever the tier is not owned

    def _dry(self, policy: str, kind: str, target: str, reason: str,
             numbers: Mapping[str, float]) -> ActionRecord | None:
        if self._dry_last.get(kind) == target:
            return None
        self._dry_last[kind] = target
        return self._record(policy, kind, target, Outcome.DRY_RUN, reason, numbers)

    @staticmethod
    def _split_note(reason: str, numbers: Mapping[str, float],
                    members: Membership) -> tuple[str, dict[str, float]]:
        note = (f"{reason}; on {len(members.members)} child cgroup(s) of the BE tier, "
                f"{len(members.spared)} with a protected pod spared")
        return note, {**numbers, "be_knob_members": len(members.members),
                      "protected_children_spared": len(members.spared)}

    def _follow(self, members: Membership) -> list[ActionRecord]:
        """A new membership (a protected pod came or went, a BE child appeared): move the knobs onto it."""
        try:
            kinds = self._be.follow(members)
        except CgroupError as err:
            self.cgroup_write_errors += 1
            self._be.applied = None  # try again next tick
            log.warning("moving BE knobs failed", extra={"fields": {"error": str(err)}})
            return [self._record("suppression", ActionKind.BE_KNOB_MEMBERS, self._be_tier, Outcome.FAILED,
                                 str(err))]
        why = (f"BE knobs follow the tier's members: {len(members.members)} child cgroup(s), "
               f"{len(members.spared)} with a protected pod spared" if members.split
               else "BE knobs back on the BE tier: no protected pod below it")
        numbers = {"be_knob_members": len(members.members), "protected_children_spared": len(members.spared)}
        quota = "max" if self._be.quota_us is None else str(self._be.quota_us)
        targets = {ActionKind.SET_BE_CPUSET: ",".join(map(str, self._be.cpuset or ())),
                   ActionKind.SET_BE_CPU_QUOTA: quota,
                   ActionKind.SET_BE_CPU_IDLE: str(int(bool(self._be.idle)))}
        return [self._record("suppression", k, targets[k], Outcome.APPLIED, why, numbers) for k in kinds]

    def _apply_cpuset(self, cpus: tuple[int, ...], members: Membership) -> bool:
        """The tier and every cgroup below it, or (a protected pod below the tier) each member's subtree
        with the tier and the spared children on every CPU. A v1 parent may not drop CPUs a child still
        has; the writer orders each batch so every step is valid (children first when shrinking)."""
        return self._be.set_cpuset(cpus, members)

    def _evict(self, action: Evict, snapshot: NodeSnapshot) -> ActionRecord:
        now = time.monotonic()
        key = action.key
        w = snapshot.workload(key)
        numbers = dict(action.numbers)
        policy = action.reason.value

        def refuse(why: HoldReason, detail: str = "") -> ActionRecord:
            self.holds[(policy, why)] += 1
            return self._record(policy, ActionKind.EVICT, key, Outcome.SKIPPED,
                                f"{why}{detail}: {action.message}", numbers)

        # First of all guards, stale data included: a policy naming a protected pod is a classification bug,
        # and it is counted every time it happens (coloc_protected_refusals_total), whatever else is wrong.
        if w is not None and w.protected:
            self.holds[(policy, HoldReason.PROTECTED)] += 1
            log.error("refused to evict a protected workload",
                      extra={"fields": {"key": key, "policy": policy}})
            return self._record(policy, ActionKind.EVICT, key, Outcome.PROTECTED,
                                f"protected: {action.message}", numbers)
        if snapshot.stale:
            return refuse(HoldReason.STALE_DATA)
        if w is None:
            return refuse(HoldReason.WORKLOAD_GONE)
        if not w.be:
            return refuse(HoldReason.NOT_BEST_EFFORT)
        if key in self._in_flight:
            return refuse(HoldReason.ALREADY_TERMINATING)
        if now - self._recently.get(key, -1e18) < self._cooldown_s:
            return refuse(HoldReason.COOLDOWN)
        if self.dry_run:
            return self._record(policy, ActionKind.EVICT, key, Outcome.DRY_RUN, action.message, numbers)
        if not self._bucket.take(now):
            return refuse(HoldReason.RATE_LIMITED)
        evictor = self._evictors.get(w.source)
        if evictor is None:
            return refuse(HoldReason.NO_EVICTOR, f"_for_{w.source.value}")
        if len(self._recently) > 4096:  # forget cool-downs that are over; keeps the map bounded
            self._recently = {k: t for k, t in self._recently.items() if now - t < self._cooldown_s}
        self._recently[key] = now
        self._start_eviction(evictor, w, action)
        return self._record(policy, ActionKind.EVICT, key, Outcome.STARTED, action.message, numbers)

    def _start_eviction(self, evictor: Evictor, w: Workload, action: Evict) -> None:
        """Hand the kill to a task of the running event loop; the tick does not wait for it."""
        self._in_flight[w.key] = asyncio.get_running_loop().create_task(self._run_evict(evictor, w, action))

    async def _run_evict(self, evictor: Evictor, w: Workload, action: Evict) -> None:
        policy = action.reason.value
        try:
            outcome = await evictor.evict(w, action)
        except Exception as err:  # an evictor bug must not kill the loop
            log.exception("evictor failed", extra={"fields": {"key": w.key}})
            outcome = EvictOutcome(False, f"evictor error: {err}")
        finally:
            self._in_flight.pop(w.key, None)
        if outcome.ok:
            self.evictions[(policy, w.source.value)] += 1
        else:
            self.eviction_failures[policy] += 1
            if outcome.try_next:
                self._try_next.add(w.key)
        numbers = {"release_milli_cpu": action.release_milli_cpu,
                   "release_memory_bytes": action.release_memory_bytes}
        ended = Outcome.DONE if outcome.ok else Outcome.FAILED
        self._ended.append(self._record(policy, ActionKind.EVICT, w.key, ended, outcome.detail, numbers))

    def release_be(self) -> bool:
        """At shutdown, after `drain`: lift every BE suppression this executor applied; False when a write
        failed (or under dry run, where nothing is written)."""
        if self.dry_run:
            return False
        try:
            with self._writer.held_by(BE_CPU):
                released = self._be.release()
            self._writer.release(BE_CPU)
            if released:
                log.info("BE knobs released", extra={"fields": {"tier": self._be_tier}})
        except CgroupError as err:
            self.cgroup_write_errors += 1
            log.warning("releasing BE knobs failed", extra={"fields": {"error": str(err)}})
            return False
        return True

    def _released_left(self) -> list[ActionRecord]:
        """After a tick on fresh data: give back the BE suppression an earlier, killed run left and this run
        has not taken up (`cgroups/holdings.py`); what could not be is tried again at the next tick."""
        if not self._writer.settle(BE_CPU):
            return []
        why = "released what an earlier run, killed while suppressing, left on the tier (this run holds none)"
        return [self._record("suppression", ActionKind.RELEASE_BE_LEFT, self._be_tier, Outcome.APPLIED, why)]

    async def drain(self, timeout_s: float) -> None:
        """Wait for in-flight evictions (at shutdown)."""
        tasks: list[Awaitable[None]] = list(self._in_flight.values())
        if tasks:
            await asyncio.wait([asyncio.ensure_future(t) for t in tasks], timeout=timeout_s)
