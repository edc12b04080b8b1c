"""Graceful decommission of the node: the Drain / Recommission requests and the controller run each tick.

Requests change the ledger only (lifecycle, drain status with the ABSOLUTE deadline, the recorded batch
allocatable), so they are persisted with it and survive restarts. Each tick the controller reads the ledger
once into the snapshot's drain view (`view`); the pure drain policy (`qos.drain.DrainPolicy`) decides from
it, once, and contributes the DRAIN_TIMEOUT evictions; after the ledger sync `on_tick` records that decision
(the pipeline's `drain` output): progress, or the end of the drain (DECOMMISSIONED).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from agent.published import ActionRecord, Outcome
from agent.state.errors import InvalidRequest
from agent.state.ledger import Ledger
from agent.state.lifecycle import Trigger
from agent.state.records import DrainPhase, DrainStatus, Lifecycle, Phase
from qos.actions import ActionKind
from qos.drain import Verdict, deadline_for
from qos.model import DrainTerms, DrainView, NodeSnapshot, Resources, Source
from qos.registry import NodeOutputs

log = logging.getLogger("coloc.drain")

MAX_TIMEOUT_S = 10 * 365 * 86400
MAX_REQUEST_ID = 128
MAX_REASON = 1024

HasProcesses = Callable[[str], bool | None]
"""Whether the cgroup (relative to the agent's root) has a process; None when it cannot be told."""


@dataclass(frozen=True, slots=True)
class DrainReply:
    lifecycle: Lifecycle
    drain: DrainStatus
    revision: int
    allocations_left: int
    changed: bool = True


def _iso(t: float | None) -> str:
    return "none" if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def check_request(request_id: str, timeout_s: int = 0, reason: str = "") -> None:
    """Raise InvalidRequest naming the field (as the proto spells it) that is malformed."""
    if len(request_id) > MAX_REQUEST_ID or not request_id.isprintable() or " " in request_id:
        raise InvalidRequest("request_id", f"must be at most {MAX_REQUEST_ID} printable characters "
                                           f"without spaces, got {request_id[:40]!r}")
    if not -MAX_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S:
        raise InvalidRequest("timeout_seconds", f"must be within ±{MAX_TIMEOUT_S} (< 0 waits forever, "
                                                f"0 is now), got {timeout_s}")
    if len(reason) > MAX_REASON:
        raise InvalidRequest("reason", f"must be at most {MAX_REASON} characters, got {len(reason)}")


def reply(ledger: Ledger, changed: bool = True) -> DrainReply:
    node = ledger.node
    left = node.drain.allocations_left if node.lifecycle is Lifecycle.DECOMMISSIONING else 0
    if node.lifecycle is Lifecycle.DECOMMISSIONING and node.drain.phase is DrainPhase.NONE:
        left = len(ledger.view().allocations)
    return DrainReply(node.lifecycle, node.drain, ledger.revision, left, changed)


def _announce(ledger: Ledger, d: DrainStatus, what: str) -> None:
    """The application masters' cue to move their work: the absolute deadline, on every watch stream."""
    mode = "graceful" if d.graceful else "forceful"
    ledger.notice("drain", f"node {ledger.identity.node_id} is decommissioning ({mode}, {what}); "
                           f"deadline {_iso(d.deadline)}",
                  {"deadline": _iso(d.deadline),
                   "deadline_unix_ms": "" if d.deadline is None else round(d.deadline * 1000),
                   "graceful": d.graceful, "wait_for_apps": d.wait_for_apps, "request_id": d.request_id})


def request_drain(ledger: Ledger, epoch: int, *, graceful: bool, timeout_s: int, wait_for_apps: bool = False,
                  request_id: str = "", reason: str = "", now: float | None = None) -> DrainReply:
    """Start a drain, or re-issue one (only the deadline moves; a forceful one evicts at once).

    Idempotent on `request_id`. Raises InvalidRequest, StaleEpoch, or LifecycleError (a graceful drain of a
    node already DECOMMISSIONED)."""
    check_request(request_id, timeout_s, reason)
    if request_id and ledger.seen_request(request_id):
        return reply(ledger, changed=False)
    now = ledger.now() if now is None else now
    node = ledger.node
    if node.lifecycle is Lifecycle.DECOMMISSIONED and not graceful:
        ledger.transition(Trigger.FORCE_DECOMMISSION, epoch, request_id=request_id)
        return reply(ledger, changed=False)
    if node.lifecycle is Lifecycle.DECOMMISSIONING:
        cur = node.drain
        if graceful:
            new = replace(cur, deadline=deadline_for(cur.started_at, timeout_s),
                          request_id=request_id or cur.request_id)
            what = "deadline changed"
        else:
            new = replace(cur, graceful=False, deadline=now, request_id=request_id or cur.request_id)
            what = "now forceful"
    else:
        new = DrainStatus(
            phase=DrainPhase.WAIT_ALLOCATIONS, graceful=graceful, wait_for_apps=wait_for_apps,
            started_at=now, deadline=deadline_for(now, timeout_s) if graceful else now,
            previous_batch_allocatable=node.batch_allocatable, request_id=request_id, reason=reason,
            allocations_left=len(ledger.view().allocations))
        what = "started"
    changed = bool(ledger.transition(Trigger.DRAIN, epoch, drain=new, request_id=request_id))
    if changed:
        _announce(ledger, new, what)
        log.info("drain %s", what,
                 extra={"fields": {"deadline": _iso(new.deadline), "graceful": new.graceful}})
    return reply(ledger, changed)


def request_recommission(ledger: Ledger, epoch: int, *, request_id: str = "") -> DrainReply:
    """DECOMMISSIONING | DECOMMISSIONED → SCHEDULABLE, reporting the recorded batch allocatable at once.

    A node already in service is left as it is (`changed` False). Idempotent on `request_id`."""
    check_request(request_id)
    if request_id and ledger.seen_request(request_id):
        return reply(ledger, changed=False)
    node = ledger.node
    if node.lifecycle not in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED):
        ledger.check_epoch(epoch)
        return reply(ledger, changed=False)
    prev = node.drain.previous_batch_allocatable
    ledger.transition(Trigger.RECOMMISSION, epoch, drain=DrainStatus(), request_id=request_id,
                      batch_allocatable=prev)
    ledger.notice("recommission", f"node {ledger.identity.node_id} is back in service",
                  {"batch_allocatable_milli_cpu": (prev or Resources()).milli_cpu,
                   "batch_allocatable_memory_bytes": (prev or Resources()).memory_bytes})
    log.info("recommissioned")
    return reply(ledger)


class DrainController:
    """The ledger's side of a drain each tick: `view` before the policies, `on_tick` after the ledger sync.

    A BE cgroup with no process left is a finished container (`has_processes`): it does not hold the
    drain up. Kubernetes pods are left to their own lifecycle (their cgroup goes when the pod goes)."""

    def __init__(self, ledger: Ledger, has_processes: HasProcesses = lambda _: None,
                 clock: Callable[[], float] | None = None) -> None:
        self._ledger = ledger
        self._has_processes = has_processes
        self._clock = clock or ledger.now

    def view(self, snap: NodeSnapshot) -> DrainView | None:
        """The drain in progress as the snapshot should carry it, read from the ledger and the finished
        containers' cgroups (changing nothing); None when the node is not draining, or the data is stale
        (nothing is decided on missing data). Applications seen: those the drain status recorded as waiting
        and those active now (an allocation or a workload here not finished); `wait_for_apps` waits for the
        active ones."""
        node = self._ledger.node
        if node.lifecycle is not Lifecycle.DECOMMISSIONING or snap.stale:
            return None
        d = node.drain
        be = [w for w in snap.workloads if w.be]
        finished = frozenset(w.key for w in be
                             if w.source is not Source.K8S and self._has_processes(w.cgroup) is False)
        allocations = self._ledger.view().allocations
        pending = tuple(a.key for a in allocations if a.phase is Phase.PENDING_LAUNCH)
        active = frozenset({a.application_id for a in allocations if a.key not in finished}
                           | {w.app_id or w.key for w in be if w.key not in finished})
        return DrainView(DrainTerms(d.graceful, d.wait_for_apps, d.started_at, d.deadline), self._clock(),
                         pending, finished, frozenset(d.waiting_applications) | active, active)

    def on_tick(self, _snap: NodeSnapshot, outputs: NodeOutputs, records: list[ActionRecord]) -> None:
        """Record the tick's drain decision (`outputs.drain`): its progress, or the end of the drain."""
        dec = outputs.drain
        ledger = self._ledger
        if dec is None or ledger.node.lifecycle is not Lifecycle.DECOMMISSIONING:
            return
        d = ledger.node.drain
        progress = replace(d, allocations_left=dec.allocations_left,
                           waiting_applications=dec.waiting_applications)
        if dec.verdict is Verdict.DRAINED:
            ledger.transition(Trigger.DRAINED, None, drain=replace(progress, phase=DrainPhase.DRAINED))
            ledger.notice("drain", f"node {ledger.identity.node_id} is drained: DECOMMISSIONED",
                          {"outcome": "drained"})
            log.info("drained: decommissioned")
        elif dec.verdict is Verdict.TIMED_OUT:
            started = {r.target for r in records
                       if r.kind == ActionKind.EVICT and r.outcome in (Outcome.STARTED, Outcome.DRY_RUN)}
            waiting = [e.key for e in dec.evict if e.key not in started]
            timed_out = replace(progress, phase=DrainPhase.TIMED_OUT)
            if d.phase is not DrainPhase.TIMED_OUT:
                ledger.notice("drain", f"{'forceful decommission' if not d.graceful else 'deadline passed'}: "
                                       f"evicting {len(dec.evict)} allocation(s)",
                              {"deadline": _iso(d.deadline), "evict": ",".join(e.key for e in dec.evict)})
            if waiting:  # held back (rate limit, cool-down): try again next tick, still DECOMMISSIONING
                ledger.update_drain(timed_out)
                return
            ledger.transition(Trigger.DRAINED, None, drain=timed_out)
            ledger.notice("drain", f"node {ledger.identity.node_id} timed out: DECOMMISSIONED",
                          {"outcome": "timed_out", "evicted": len(dec.evict)})
            log.info("drain timed out: decommissioned", extra={"fields": {"evicted": len(dec.evict)}})
        else:
            ledger.update_drain(replace(progress, phase=DrainPhase[dec.verdict.value]))
