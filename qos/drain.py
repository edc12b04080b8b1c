"""Graceful decommission, decided each tick (YARN-914 semantics on the node). Pure: no clock, no I/O.

A drain waits until no allocation is left (and, with `wait_for_apps`, until every application that had an
allocation here since the drain started has finished). When the absolute deadline passes first, every
allocation left is evicted (victim order, reason DRAIN_TIMEOUT). A forceful drain evicts at once.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from qos.actions import Action, Evict, EvictReason
from qos.model import DrainTerms, NodeSnapshot, Workload
from qos.pipeline import Policy
from qos.victims import order_victims

__all__ = ["DrainDecision", "DrainPolicy", "DrainTerms", "Verdict", "deadline_for", "decide_drain",
           "drain_decision"]


class Verdict(enum.Enum):
    WAIT_ALLOCATIONS = "WAIT_ALLOCATIONS"
    WAIT_APPS = "WAIT_APPS"
    DRAINED = "DRAINED"  # nothing left: the node is DECOMMISSIONED
    TIMED_OUT = "TIMED_OUT"  # deadline passed (or forceful): evict what is left, then DECOMMISSIONED


@dataclass(frozen=True, slots=True)
class DrainDecision:
    verdict: Verdict
    evict: tuple[Evict, ...] = ()
    allocations_left: int = 0
    waiting_applications: tuple[str, ...] = ()
    time_left_s: float | None = None  # None: no deadline


def deadline_for(started_at: float, timeout_s: float) -> float | None:
    """The absolute deadline of a drain that started at `started_at`: < 0 waits forever, 0 is now.

    Re-issuing a drain passes the original start, so it moves the deadline without restarting the clock."""
    if timeout_s < 0:
        return None
    return started_at + timeout_s


def decide_drain(terms: DrainTerms, workloads: Iterable[Workload], pending: Collection[str],
                 finished: Collection[str], apps_seen: Collection[str], apps_active: Collection[str],
                 now: float) -> DrainDecision:
    """Decide one tick of a drain.

    `workloads`: the snapshot's workloads (only BE ones count); `finished`: keys of BE workloads that have
    ended although their record is still there (a cgroup with no process); `pending`: keys admitted but
    not yet launched (they count as left and cannot be evicted); `apps_seen`: applications that had an
    allocation here since the drain started; `apps_active`: applications not yet finished."""
    left = [w for w in workloads if w.be and w.key not in finished]
    left_keys = {w.key for w in left}
    n_left = len(left) + len([k for k in pending if k not in left_keys])
    waiting = tuple(sorted(set(apps_seen) & set(apps_active))) if terms.wait_for_apps else ()
    time_left = None if terms.deadline is None else terms.deadline - now
    if n_left == 0 and not waiting:
        return DrainDecision(Verdict.DRAINED, time_left_s=time_left)
    if not terms.graceful or (time_left is not None and time_left <= 0):
        how = "forceful decommission" if not terms.graceful else "drain deadline passed"
        evict = tuple(
            Evict(w.key, EvictReason.DRAIN_TIMEOUT, f"{how}: node is being decommissioned",
                  release_milli_cpu=max(w.requests.milli_cpu, 0),
                  release_memory_bytes=max(w.usage.memory_working_set_bytes or 0, 0),
                  numbers={"deadline": terms.deadline if terms.deadline is not None else now})
            for w in order_victims(left))
        return DrainDecision(Verdict.TIMED_OUT, evict, n_left, waiting, time_left)
    verdict = Verdict.WAIT_ALLOCATIONS if n_left else Verdict.WAIT_APPS
    return DrainDecision(verdict, (), n_left, waiting, time_left)


def drain_decision(snapshot: NodeSnapshot) -> DrainDecision | None:
    """This tick's decision for the drain the snapshot carries; None when there is none, or the data is
    stale (a drain never decides, nor evicts, on missing data)."""
    view = snapshot.drain
    if view is None or snapshot.stale:
        return None
    be = [w for w in snapshot.workloads if w.be]
    return decide_drain(view.terms, be, view.pending, view.finished, view.apps_seen, view.apps_active,
                        view.now)


@dataclass(frozen=True, slots=True)
class DrainPolicy(Policy[DrainDecision | None]):
    """The drain behind the pipeline protocol: it decides once per tick, contributes the DRAIN_TIMEOUT
    evictions, and keeps the decision as its state (the pipeline's `drain` output, which the decommission
    controller records). The ledger keeps the drain itself, and the snapshot carries it."""

    name: str = field(default="drain")

    def initial_state(self) -> DrainDecision | None:
        return None

    def decide(self, snapshot: NodeSnapshot, state: DrainDecision | None,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], DrainDecision | None]:
        decision = drain_decision(snapshot)
        return ([] if decision is None else list(decision.evict)), decision
