"""The node lifecycle table: every allowed edge, every refused one, and what a restart keeps."""

from __future__ import annotations

import itertools

import pytest

from agent.state import Lifecycle, LifecycleError, Trigger
from agent.state.lifecycle import admits, next_state, on_start, reports_batch

R, S, DING, DED = (
    Lifecycle.RECOVERING,
    Lifecycle.SCHEDULABLE,
    Lifecycle.DECOMMISSIONING,
    Lifecycle.DECOMMISSIONED,
)
ALLOWED = {
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


@pytest.mark.parametrize(("state", "trigger"), list(itertools.product(Lifecycle, Trigger)))
def test_every_pair(state: Lifecycle, trigger: Trigger) -> None:
    if (state, trigger) in ALLOWED:
        assert next_state(state, trigger) is ALLOWED[(state, trigger)]
    else:
        with pytest.raises(
            LifecycleError, match=f"{trigger.value} is not allowed while the node is {state.value}"
        ):
            next_state(state, trigger)


def test_restart_keeps_only_a_drain() -> None:
    assert on_start(None) is R
    assert on_start(S) is R  # a new incarnation must be acknowledged again
    assert on_start(DING) is DING and on_start(DED) is DED


def test_only_schedulable_admits_and_draining_reports_no_batch() -> None:
    assert [admits(s) for s in Lifecycle] == [False, True, False, False]
    assert [reports_batch(s) for s in Lifecycle] == [True, True, False, False]
