"""Every node lifecycle transition, in one table. Pure: no clock, no I/O.

    RECOVERING ──ACK_RECOVERY──► SCHEDULABLE
    RECOVERING | SCHEDULABLE ──DRAIN──► DECOMMISSIONING ──DRAINED──► DECOMMISSIONED
    RECOVERING | SCHEDULABLE | DECOMMISSIONING ──FORCE_DECOMMISSION──► DECOMMISSIONED
    DECOMMISSIONING | DECOMMISSIONED ──RECOMMISSION──► SCHEDULABLE

An acknowledgement while decommissioning leaves the state alone (the drain wins); re-issuing DRAIN while
DECOMMISSIONING is allowed (it only moves the deadline). RECOVERING means exactly one thing: waiting for a
central scheduler's AckRecovery; a node configured without a scheduler never enters it.
"""

from __future__ import annotations

import enum

from agent.state.errors import LifecycleError
from agent.state.records import Lifecycle, NodeRecord

R, S = Lifecycle.RECOVERING, Lifecycle.SCHEDULABLE
DING, DED = Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED


class Trigger(enum.Enum):
    ACK_RECOVERY = "ACK_RECOVERY"
    DRAIN = "DRAIN"
    DRAINED = "DRAINED"
    FORCE_DECOMMISSION = "FORCE_DECOMMISSION"
    RECOMMISSION = "RECOMMISSION"


_TABLE: dict[tuple[Lifecycle, Trigger], Lifecycle] = {
    (R, Trigger.ACK_RECOVERY): S,
    (S, Trigger.ACK_RECOVERY): S,
    (DING, Trigger.ACK_RECOVERY): DING,
    (DED, Trigger.ACK_RECOVERY): DED,
    (R, Trigger.DRAIN): DING,
    (S, Trigger.DRAIN): DING,
    (DING, Trigger.DRAIN): DING,
    (DING, Trigger.DRAINED): DED,
    (R, Trigger.FORCE_DECOMMISSION): DED,
    (S, Trigger.FORCE_DECOMMISSION): DED,
    (DING, Trigger.FORCE_DECOMMISSION): DED,
    (DED, Trigger.FORCE_DECOMMISSION): DED,
    (DING, Trigger.RECOMMISSION): S,
    (DED, Trigger.RECOMMISSION): S,
}


def next_state(current: Lifecycle, trigger: Trigger) -> Lifecycle:
    """The state after `trigger`, or LifecycleError naming both when the table has no such edge."""
    try:
        return _TABLE[(current, trigger)]
    except KeyError:
        raise LifecycleError(f"{trigger.value} is not allowed while the node is {current.value}") from None


WAITING_FOR_ACK = "a scheduler's AckRecovery"
WAITING_FOR_DRAIN = "the drain to finish"


def on_start(persisted: Lifecycle | None, *, await_ack: bool = True) -> Lifecycle:
    """A drain survives restarts. Otherwise a new incarnation starts RECOVERING when a central scheduler
    must first acknowledge its state, and SCHEDULABLE when none is configured (nobody would ever ack)."""
    if persisted in (DING, DED):
        return persisted
    return R if await_ack else S


def waiting(node: NodeRecord, incarnation_started: float) -> tuple[str, float]:
    """What the lifecycle waits for and since when (wall-clock seconds); ("", 0.0) when it waits for
    nothing. RECOVERING waits since the incarnation started, DECOMMISSIONING since the drain started."""
    if node.lifecycle is R:
        return WAITING_FOR_ACK, incarnation_started
    if node.lifecycle is DING:
        return WAITING_FOR_DRAIN, node.drain.started_at
    return "", 0.0


def admits(state: Lifecycle) -> bool:
    """Whether new batch allocations may be admitted."""
    return state is S


def reports_batch(state: Lifecycle) -> bool:
    """Whether the node offers batch capacity; a decommissioning node reports zero."""
    return state in (R, S)
