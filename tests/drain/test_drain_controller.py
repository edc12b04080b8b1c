"""Drain requests and the per-tick controller over a real ledger (in memory, or on disk for restarts).

The executor is represented by the records it would return ("started" per eviction), as the tick loop
hands them to the hooks; the real executor and real processes are in test_drain_agent_process.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from drainkit import be, decided, plan, snapshot, with_drain
from kit.clock import FakeClock

from agent.decommission.controller import DrainController, request_drain, request_recommission
from agent.published import ActionRecord
from agent.state.errors import InvalidRequest, LifecycleError, StaleEpoch
from agent.state.ledger import Ledger, LedgerConfig
from agent.state.records import AdmitRequest, DrainPhase, EventType, Lifecycle, Notice
from qos.actions import Evict
from qos.model import NodeSnapshot, Resources, Source, Workload

BATCH = Resources(2000, 4 << 30)


def schedulable(path: Path | None = None, clock: FakeClock | None = None) -> tuple[Ledger, FakeClock]:
    clock = clock or FakeClock()
    cfg = LedgerConfig("node-d", state_path=str(path) if path else None)
    ledger = Ledger.open(cfg, boot_id="boot", clock=clock)
    ledger.sync(snapshot(), BATCH, clock())
    ledger.ack_recovery(1, ledger.revision)
    return ledger, clock


def tick(ledger: Ledger, ctl: DrainController, workloads: Sequence[Workload], clock: FakeClock,
         refuse: Sequence[str] = ()) -> list[Evict]:
    """One tick as the loop runs it: drain view → plan → execute (evictions start, unless refused) → sync
    → hooks."""
    snap: NodeSnapshot = with_drain(ctl, snapshot(*workloads, at=clock()))
    evicts = [a for a in plan(snap) if isinstance(a, Evict)]
    records = [ActionRecord(clock(), e.reason.value, "evict", e.key,
                            "skipped" if e.key in refuse else "started", e.message) for e in evicts]
    ledger.sync(snap, BATCH, clock())
    ctl.on_tick(snap, decided(snap, BATCH), records)
    return evicts


def notices(ledger: Ledger, kind: str) -> list[Notice]:
    return [e.obj for e in ledger.recent_events(500)
            if e.type is EventType.NOTICE and isinstance(e.obj, Notice) and e.obj.kind == kind]


def test_drain_reports_zero_allocatable_records_the_previous_and_refuses_admit() -> None:
    ledger, clock = schedulable()
    r = request_drain(ledger, 1, graceful=True, timeout_s=60, request_id="r1")
    assert r.lifecycle is Lifecycle.DECOMMISSIONING and r.changed
    node = ledger.node
    assert node.batch_allocatable == Resources(), "allocatable drops to 0 at once, not at the next tick"
    assert node.drain.previous_batch_allocatable == BATCH
    assert node.drain.deadline == clock() + 60
    ledger.sync(snapshot(), BATCH, clock())
    assert ledger.node.batch_allocatable == Resources(), "each tick keeps it at 0 while draining"
    res = ledger.admit(AdmitRequest("local/besteffort/new", "app", Source.LOCAL, Resources(100, 0)), 1)
    assert not res.accepted and "DECOMMISSIONING" in res.message
    [n] = notices(ledger, "drain")
    assert dict(n.fields)["deadline_unix_ms"] == str(int((clock() + 60) * 1000)), "the ABSOLUTE deadline"


def test_graceful_drain_waits_then_drains_when_the_work_ends_by_itself() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    a, b = be("a"), be("b")
    tick(ledger, ctl, [a, b], clock)
    request_drain(ledger, 1, graceful=True, timeout_s=60)
    assert tick(ledger, ctl, [a, b], clock) == []
    assert ledger.node.drain.allocations_left == 2
    clock.advance(10)
    tick(ledger, ctl, [b], clock)
    assert ledger.node.drain.allocations_left == 1 and ledger.node.lifecycle is Lifecycle.DECOMMISSIONING
    clock.advance(10)
    tick(ledger, ctl, [], clock)
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED
    assert ledger.node.drain.phase is DrainPhase.DRAINED


def test_deadline_evicts_what_is_left_and_records_timed_out() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    ws = [be("a", priority=5000), be("b", priority=1000)]
    tick(ledger, ctl, ws, clock)
    request_drain(ledger, 1, graceful=True, timeout_s=30)
    clock.advance(30)
    evicted = tick(ledger, ctl, ws, clock)
    assert [e.key for e in evicted] == ["local/besteffort/b", "local/besteffort/a"], "victim order"
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED
    assert ledger.node.drain.phase is DrainPhase.TIMED_OUT


def test_timed_out_evictions_held_back_are_retried_before_decommissioning() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    ws = [be("a"), be("b")]
    tick(ledger, ctl, ws, clock)
    request_drain(ledger, 1, graceful=True, timeout_s=0)
    tick(ledger, ctl, ws, clock, refuse=["local/besteffort/b"])
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONING
    assert ledger.node.drain.phase is DrainPhase.TIMED_OUT
    again = tick(ledger, ctl, [be("a", terminating=True), be("b")], clock)
    assert [e.key for e in again] == ["local/besteffort/b"]
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED


def test_stale_data_decides_nothing() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    request_drain(ledger, 1, graceful=True, timeout_s=0)
    assert plan(with_drain(ctl, snapshot(be("a"), stale={"cgroups": "unreadable"}))) == []
    ctl.on_tick(snapshot(), decided(snapshot(), BATCH), [])
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONING, "an empty-looking stale tick is not drained"


def test_a_cgroup_without_processes_is_a_finished_container() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, has_processes=lambda cg: cg != "besteffort/done", clock=clock)
    request_drain(ledger, 1, graceful=True, timeout_s=60)
    tick(ledger, ctl, [be("done"), be("k", source=Source.K8S)], clock)
    assert ledger.node.drain.allocations_left == 1, "the empty local cgroup no longer counts"
    tick(ledger, ctl, [be("done")], clock)
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED


def test_timeout_zero_evicts_at_the_next_tick_and_empty_node_drains_at_once() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    request_drain(ledger, 1, graceful=True, timeout_s=0)
    assert [e.key for e in tick(ledger, ctl, [be("x")], clock)] == ["local/besteffort/x"]
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED
    empty, clock2 = schedulable()
    ctl2 = DrainController(empty, clock=clock2)
    request_drain(empty, 1, graceful=True, timeout_s=3600)
    tick(empty, ctl2, [], clock2)
    assert empty.node.lifecycle is Lifecycle.DECOMMISSIONED and empty.node.drain.phase is DrainPhase.DRAINED


def test_negative_timeout_has_no_deadline() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    request_drain(ledger, 1, graceful=True, timeout_s=-1)
    assert ledger.node.drain.deadline is None
    clock.advance(1e8)
    assert tick(ledger, ctl, [be("a")], clock) == []
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONING


def test_reissue_changes_only_the_deadline_counted_from_the_start() -> None:
    ledger, clock = schedulable()
    request_drain(ledger, 1, graceful=True, timeout_s=60, wait_for_apps=True, reason="kernel")
    first = ledger.node.drain
    clock.advance(20)
    request_drain(ledger, 1, graceful=True, timeout_s=30, wait_for_apps=False, reason="other")
    shorter = ledger.node.drain
    assert shorter.deadline == first.started_at + 30
    kept = (shorter.started_at, shorter.wait_for_apps, shorter.reason, shorter.previous_batch_allocatable)
    assert kept == (first.started_at, True, "kernel", BATCH)
    request_drain(ledger, 1, graceful=True, timeout_s=600)
    assert ledger.node.drain.deadline == first.started_at + 600
    assert [dict(n.fields)["deadline"] for n in notices(ledger, "drain")][-1].startswith("1970-01-01T00:26")


def test_forceful_evicts_at_once_and_decommissions() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    request_drain(ledger, 1, graceful=False, timeout_s=0)
    assert [e.key for e in tick(ledger, ctl, [be("a")], clock)] == ["local/besteffort/a"]
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED
    # Forceful on a decommissioned node is a no-op; graceful is refused, naming the state.
    assert not request_drain(ledger, 1, graceful=False, timeout_s=0).changed
    with pytest.raises(LifecycleError, match="DECOMMISSIONED"):
        request_drain(ledger, 1, graceful=True, timeout_s=10)


def test_forceful_reissue_during_a_graceful_drain_evicts_now() -> None:
    ledger, clock = schedulable()
    ctl = DrainController(ledger, clock=clock)
    request_drain(ledger, 1, graceful=True, timeout_s=3600)
    assert tick(ledger, ctl, [be("a")], clock) == []
    request_drain(ledger, 1, graceful=False, timeout_s=0)
    assert [e.key for e in tick(ledger, ctl, [be("a")], clock)] == ["local/besteffort/a"]
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED


def test_recommission_during_and_after_restores_the_recorded_allocatable() -> None:
    for finish in (False, True):
        ledger, clock = schedulable()
        ctl = DrainController(ledger, clock=clock)
        request_drain(ledger, 1, graceful=True, timeout_s=60)
        if finish:
            tick(ledger, ctl, [], clock)
            assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONED
        r = request_recommission(ledger, 1, request_id=f"rc-{finish}")
        assert r.lifecycle is Lifecycle.SCHEDULABLE
        assert ledger.node.batch_allocatable == BATCH, "restored at once"
        assert ledger.node.drain.phase is DrainPhase.NONE and ledger.node.drain.deadline is None
        res = ledger.admit(AdmitRequest("local/besteffort/n", "app", Source.LOCAL, Resources(100, 0)), 1)
        assert res.accepted
        assert tick(ledger, ctl, [be("n")], clock) == [], "no drain: the controller does nothing"
    # On a node in service it changes nothing.
    assert not request_recommission(ledger, 1).changed


def test_requests_are_idempotent_on_request_id_and_fenced() -> None:
    ledger, clock = schedulable()
    request_drain(ledger, 5, graceful=True, timeout_s=60, request_id="same")
    rev = ledger.revision
    clock.advance(5)
    again = request_drain(ledger, 5, graceful=True, timeout_s=10, request_id="same")
    assert not again.changed and ledger.revision == rev and ledger.node.drain.deadline == 1060
    with pytest.raises(StaleEpoch):
        request_drain(ledger, 4, graceful=True, timeout_s=10, request_id="other")
    with pytest.raises(StaleEpoch):
        request_recommission(ledger, 4, request_id="r")
    assert ledger.node.lifecycle is Lifecycle.DECOMMISSIONING and ledger.revision == rev


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"request_id": "has space"}, "request_id"),
    ({"request_id": "x" * 200}, "request_id"),
    ({"timeout_s": 10 ** 12}, "timeout_seconds"),
    ({"reason": "r" * 5000}, "reason"),
])
def test_bad_input_names_the_field_and_changes_nothing(kwargs: dict[str, object], field: str) -> None:
    ledger, _ = schedulable()
    rev = ledger.revision
    args: dict[str, object] = {"graceful": True, "timeout_s": 60, **kwargs}
    with pytest.raises(InvalidRequest) as err:
        request_drain(ledger, 1, **args)  # type: ignore[arg-type]
    assert err.value.field == field and str(err.value).startswith(f"{field}:")
    assert ledger.revision == rev and ledger.node.lifecycle is Lifecycle.SCHEDULABLE


def test_drain_state_and_absolute_deadline_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    ledger, clock = schedulable(path)
    request_drain(ledger, 1, graceful=True, timeout_s=60, wait_for_apps=True, request_id="d1")
    ledger.save()
    clock.advance(30)  # the agent is down for 30 s
    again = Ledger.open(LedgerConfig("node-d", state_path=str(path)), boot_id="boot", clock=clock)
    node = again.node
    assert node.lifecycle is Lifecycle.DECOMMISSIONING
    assert node.drain.deadline == 1060 and node.drain.started_at == 1000, "absolute, not restarted"
    assert node.drain.previous_batch_allocatable == BATCH and node.drain.wait_for_apps
    assert again.seen_request("d1")
    ctl = DrainController(again, clock=clock)
    assert tick(again, ctl, [be("a")], clock) == [], "30 s still left: not decommissioned at start"
    clock.advance(31)
    assert [e.key for e in tick(again, ctl, [be("a")], clock)] == ["local/besteffort/a"]
    assert again.node.lifecycle is Lifecycle.DECOMMISSIONED
    assert request_recommission(again, 1).lifecycle is Lifecycle.SCHEDULABLE
    assert again.node.batch_allocatable == BATCH, "the recorded allocatable survived the restart"


def test_a_deadline_that_passed_while_down_is_acted_on_at_the_first_tick(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    ledger, clock = schedulable(path)
    request_drain(ledger, 1, graceful=True, timeout_s=10)
    ledger.save()
    clock.advance(100)
    again = Ledger.open(LedgerConfig("node-d", state_path=str(path)), boot_id="boot", clock=clock)
    ctl = DrainController(again, clock=clock)
    assert [e.key for e in tick(again, ctl, [be("a"), be("b")], clock)] == \
        ["local/besteffort/a", "local/besteffort/b"]
    assert again.node.lifecycle is Lifecycle.DECOMMISSIONED
