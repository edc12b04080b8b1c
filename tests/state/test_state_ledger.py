"""The ledger on its own: derivation from snapshots, admission, fencing, acknowledgement, events, watchers."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from kit.api import Mirror, admit_request
from kit.clock import FakeClock
from kit.snapshot import application_id as yarn_app
from kit.snapshot import container_id as container
from kit.snapshot import hp_workload as hp
from kit.snapshot import workload
from statekit import CAP, snapshot, yarn

from agent.state import (
    AdmitRequest,
    EventType,
    InvalidRequest,
    Ledger,
    LedgerConfig,
    Lifecycle,
    Phase,
    Refusal,
    RevisionAhead,
    RevisionGone,
    StaleEpoch,
    WatcherDropped,
)
from qos.model import Resources, Source

BATCH = Resources(2000, 4 << 30)
UID = "0b6e1c9a-6f9d-4a55-9a3c-2f1e8c7d6b5a"
POD = workload(f"k8s/{UID}", name=f"pod-{UID[:8]}", priority=3000, cgroup=f"besteffort/pod{UID}", cpu=None,
               mem=None, request_cpu=200, request_mem=128 << 20, namespace="batch")  # a BE pod of its own app
# The scheduler's request for YARN container `seq` of application `app`: 500 milli-CPU and 1 GiB unless said.
request = partial(admit_request, cpu=500, mem=1 << 30, priority=5000)


def make(ring: int = 4096, ttl: float = 60.0, clock: FakeClock | None = None) -> Ledger:
    return Ledger(
        LedgerConfig(
            node_id="node-a", state_path=None, ring_size=ring, pending_launch_ttl_s=ttl, watch_queue_size=16
        ),
        boot_id="boot-1",
        clock=clock or FakeClock(),
    )


def schedulable(ledger: Ledger, epoch: int = 1) -> None:
    ledger.sync(snapshot([]), BATCH, 1000.0)
    ledger.ack_recovery(epoch, ledger.revision)
    assert ledger.node.lifecycle is Lifecycle.SCHEDULABLE


def test_sync_derives_applications_before_allocations_and_removes_both() -> None:
    led = make()
    web = hp("web", request_cpu=1000, request_mem=1 << 30)
    events = led.sync(snapshot([yarn(1, 1), yarn(1, 2), POD, web]), BATCH, 1000.0)
    kinds = [(e.type, type(e.obj).__name__) for e in events]
    assert kinds == [
        (EventType.MODIFIED, "NodeRecord"),
        (EventType.ADDED, "Application"),
        (EventType.ADDED, "Allocation"),
        (EventType.ADDED, "Allocation"),
        (EventType.ADDED, "Application"),
        (EventType.ADDED, "Allocation"),
    ]
    assert [e.revision for e in events] == list(range(1, 7))
    view = led.view()
    assert [a.application_id for a in view.applications] == [yarn_app(1), f"k8s/{UID}"]
    assert {a.key for a in view.allocations} == {
        f"yarn/{container(1, 1)}",
        f"yarn/{container(1, 2)}",
        f"k8s/{UID}",
    }
    assert all(
        a.revision == e.revision for a, e in zip(view.applications, [events[1], events[4]], strict=True)
    )
    assert view.node.capacity == CAP and view.node.batch_allocatable == BATCH
    assert led.batch_allocated == Resources(400, 256 << 20)

    events = led.sync(snapshot([yarn(1, 2)]), BATCH, 1001.0)
    assert [(type(e.obj).__name__, e.type, e.reason) for e in events] == [
        ("Allocation", EventType.DELETED, "gone"),
        ("Application", EventType.DELETED, "no allocations left"),
        ("Allocation", EventType.DELETED, "gone"),
    ]
    assert [a.application_id for a in led.view().applications] == [yarn_app(1)]
    assert led.sync(snapshot([yarn(1, 2)]), BATCH, 1002.0) == []  # nothing changed: no revision
    assert led.revision == 9


def test_terminating_and_changed_requests_are_modifications() -> None:
    led = make()
    led.sync(snapshot([yarn(1, 1)]), BATCH, 1000.0)
    ev = led.sync(snapshot([yarn(1, 1, request_cpu=300)]), BATCH, 1001.0)
    assert len(ev) == 1 and ev[0].type is EventType.MODIFIED and ev[0].obj.resources.milli_cpu == 300
    ev = led.sync(snapshot([yarn(1, 1, request_cpu=300, terminating=True)]), BATCH, 1002.0)
    assert ev[0].obj.phase is Phase.TERMINATING
    ev = led.sync(snapshot([yarn(1, 1, request_cpu=300, terminating=False)]), BATCH, 1003.0)
    assert ev == []  # terminating is one-way
    assert led.batch_allocated == Resources(300, 64 << 20)


@pytest.mark.parametrize("change", [
    {"request_cpu": 200}, {"request_mem": 128 << 20}, {"priority": 7}, {"cgroup": "besteffort/elsewhere"},
    {"name": "renamed"}, {"app_id": "application_1700000000000_0042"}, {"terminating": True}])
def test_every_field_the_sync_compares_is_seen_after_unchanged_ticks(change: dict[str, object]) -> None:
    """The sync remembers what it compared each allocation with (the comparison's memo): after unchanged
    ticks, a change of any one compared field is still one modification; a readmitted key starts afresh."""
    led = make()
    schedulable(led)
    led.sync(snapshot([yarn(1, 1)]), BATCH, 1001.0)
    for t in range(3):  # the same fields again, in new objects: nothing to do
        assert led.sync(snapshot([yarn(1, 1)]), BATCH, 1002.0 + t) == []
    app = change.get("app_id")
    kw = {k: v for k, v in change.items() if k != "app_id"}
    changed = replace(yarn(1, 1, **kw), app_id=app) if app else yarn(1, 1, **kw)
    ev = led.sync(snapshot([changed]), BATCH, 1010.0)
    assert [e.type for e in ev if hasattr(e.obj, "key")] == [EventType.MODIFIED]
    assert led.sync(snapshot([changed]), BATCH, 1011.0) == []
    led.sync(snapshot([]), BATCH, 1012.0)  # gone; admitted again under the same key: pending, then started
    assert led.admit(request(1, 1, cpu=100), 1).accepted
    ev = led.sync(snapshot([changed]), BATCH, 1013.0)
    assert [(e.type, e.reason) for e in ev if hasattr(e.obj, "key")] == [(EventType.MODIFIED, "started")]


def test_stale_source_keeps_its_allocations() -> None:
    led = make()
    led.sync(snapshot([yarn(1, 1), POD]), BATCH, 1000.0)
    # The YARN source is stale: its container is not listed, but missing data is not an empty node.
    ev = led.sync(snapshot([POD], stale={"yarn": "NodeManager unreachable"}), BATCH, 1001.0)
    assert ev == []
    # An unnamed source (the cgroup listing itself) holds every removal.
    assert led.sync(snapshot([], stale={"cgroups": "root unreadable"}), BATCH, 1002.0) == []
    ev = led.sync(snapshot([POD]), BATCH, 1003.0)
    assert [e.obj.key for e in ev if e.type is EventType.DELETED and hasattr(e.obj, "key")] == [
        f"yarn/{container(1, 1)}"
    ]


def test_admit_pending_launch_becomes_running_when_the_source_sees_it() -> None:
    led = make()
    schedulable(led, epoch=3)
    res = led.admit(request(7, 1, cpu=500), 3)
    assert res.accepted and not res.already_admitted and res.allocation is not None
    assert res.allocation.phase is Phase.PENDING_LAUNCH and res.allocation.scheduler_epoch == 3
    assert res.batch_free == Resources(1500, 3 << 30)
    # The container starts; the cgroup reader knows no requests: the admitted ones are kept.
    w = yarn(7, 1, request_cpu=0, request_mem=0)
    ev = led.sync(snapshot([w]), BATCH, 1001.0)
    assert [(e.type, e.reason) for e in ev] == [(EventType.MODIFIED, "started")]
    a = led.allocation(w.key)
    assert a is not None and a.phase is Phase.RUNNING and a.resources == Resources(500, 1 << 30)
    assert a.request_id == "req-7-1" and a.scheduler_epoch == 3


def test_admit_is_idempotent_and_refuses_conflicts_and_overcommit() -> None:
    led = make()
    schedulable(led)
    first = led.admit(request(1, 1, cpu=1500), 1)
    rev = led.revision
    again = led.admit(request(1, 1, cpu=1500), 1)
    assert again.accepted and again.already_admitted and again.allocation == first.allocation
    assert led.revision == rev
    # Same key, other application: a conflict, nothing recorded.
    clash = AdmitRequest(
        key=f"yarn/{container(1, 1)}",
        application_id=yarn_app(1),
        source=Source.YARN,
        resources=Resources(1, 1),
    )
    assert led.admit(clash, 1).already_admitted  # same application: the existing record is the answer
    k = AdmitRequest(
        key=f"local/besteffort/{container(1, 1)}",
        application_id="other",
        source=Source.LOCAL,
        resources=Resources(100, 1),
    )
    assert led.admit(k, 1).accepted
    conflict = AdmitRequest(
        key=k.key, application_id="someone-else", source=Source.LOCAL, resources=Resources(100, 1)
    )
    r = led.admit(conflict, 1)
    assert not r.accepted and r.refusal is Refusal.KEY_CONFLICT and "other" in r.message
    # 2000 allocatable, 1600 used: 500 more does not fit.
    r = led.admit(request(2, 1, cpu=500), 1)
    assert not r.accepted and r.refusal is Refusal.INSUFFICIENT_CPU
    assert "400 free" in r.message and r.batch_free.milli_cpu == 400
    r = led.admit(request(2, 1, cpu=100, mem=8 << 30), 1)
    assert not r.accepted and r.refusal is Refusal.INSUFFICIENT_MEMORY
    assert led.admit(request(2, 1, cpu=400, mem=1 << 20), 1).accepted
    assert led.refusals == {"KEY_CONFLICT": 1, "INSUFFICIENT_CPU": 1, "INSUFFICIENT_MEMORY": 1}


def test_admit_refused_until_recovery_is_acknowledged() -> None:
    led = make()
    led.sync(snapshot([]), BATCH, 1000.0)
    r = led.admit(request(1, 1), 1)
    assert not r.accepted and r.refusal is Refusal.NOT_SCHEDULABLE and "AckRecovery" in r.message
    assert led.ack_recovery(1, led.revision).lifecycle is Lifecycle.SCHEDULABLE
    assert led.admit(request(1, 1), 1).accepted


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (AdmitRequest("k8s/not-a-uid", "a", Source.K8S, Resources(1, 1)), "allocation.key"),
        (AdmitRequest(f"yarn/{container(1, 1)}", "a", Source.K8S, Resources(1, 1)), "allocation.key"),
        (
            AdmitRequest(f"yarn/{container(1, 1)}", yarn_app(2), Source.YARN, Resources(1, 1)),
            "allocation.application_id",
        ),
        (AdmitRequest("local/../etc", "a", Source.LOCAL, Resources(1, 1)), "allocation.key"),
        (AdmitRequest("local/x", "has space", Source.LOCAL, Resources(1, 1)), "allocation.application_id"),
        (AdmitRequest("local/x", "a", Source.LOCAL, Resources(-1, 1)), "allocation.resources.milli_cpu"),
        (AdmitRequest("local/x", "a", Source.LOCAL, Resources(0, 0)), "allocation.resources"),
        (
            AdmitRequest("local/x", "a", Source.LOCAL, Resources(1, 1), priority=1 << 40),
            "allocation.priority",
        ),
        (
            AdmitRequest("local/x", "a", Source.LOCAL, Resources(1, 1), tags=(("bad key", "v"),)),
            "allocation.tags",
        ),
    ],
)
def test_bad_admissions_name_the_field_and_change_nothing(req: AdmitRequest, field: str) -> None:
    led = make()
    schedulable(led)
    before = (led.revision, led.view())
    with pytest.raises(InvalidRequest) as err:
        led.admit(req, 5)
    assert err.value.field == field
    assert (led.revision, led.view()) == before
    assert led.node.highest_epoch == 1  # the bad request's epoch was not recorded either


def test_epoch_fencing() -> None:
    led = make()
    schedulable(led, epoch=5)
    with pytest.raises(StaleEpoch, match=r"epoch 4 is stale.*seen epoch 5"):
        led.admit(request(1, 1), 4)
    with pytest.raises(StaleEpoch):
        led.ack_recovery(4, led.revision)
    with pytest.raises(InvalidRequest, match=r"fence\.scheduler_epoch"):
        led.admit(request(1, 1), 0)
    assert led.admit(request(1, 1), 6).accepted
    assert led.node.highest_epoch == 6
    with pytest.raises(StaleEpoch):
        led.admit(request(1, 2), 5)


def test_ack_checks_the_revision() -> None:
    led = make()
    led.sync(snapshot([yarn(1, 1)]), BATCH, 1000.0)
    with pytest.raises(RevisionAhead, match="applied_revision"):
        led.ack_recovery(1, led.revision + 1)
    assert led.node.lifecycle is Lifecycle.RECOVERING
    res = led.ack_recovery(1, led.revision)
    assert res.lifecycle is Lifecycle.SCHEDULABLE
    assert led.node.acked_epoch == 1 and led.node.acked_revision == res.revision - 2


def test_pending_launch_expires_after_ttl() -> None:
    clock = FakeClock(1000.0)
    led = make(ttl=30.0, clock=clock)
    schedulable(led)
    led.admit(request(1, 1), 1)
    assert led.sync(snapshot([]), BATCH, 1029.0) == []
    ev = led.sync(snapshot([]), BATCH, 1031.0)
    assert [(type(e.obj).__name__, e.type, e.reason) for e in ev] == [
        ("Allocation", EventType.DELETED, "launch_expired"),
        ("Application", EventType.DELETED, "no allocations left"),
    ]
    assert led.batch_allocated == Resources()


def test_events_replay_to_the_view_at_every_revision() -> None:
    led = make()
    schedulable(led)
    replica = Mirror(led.view())
    steps = [
        [yarn(1, 1), yarn(1, 2), POD],
        [yarn(1, 2, request_cpu=50), replace(POD, app_id="spark-1")],
        [yarn(1, 2, request_cpu=50, terminating=True), yarn(2, 1)],
        [],
    ]
    for n, ws in enumerate(steps):
        led.notice("suppression", f"step {n}", {"n": n})
        led.sync(snapshot(ws), BATCH, 1000.0 + n)
        assert not replica.matches(led.view())
        for ev in led.events_after(replica.revision):
            replica.apply(ev)
        assert replica.matches(led.view())
    assert not replica.allocs and not replica.apps


def test_ring_overflow_reports_revision_gone() -> None:
    led = make(ring=16)
    for n in range(30):
        led.sync(snapshot([yarn(1, s) for s in range(1, n + 2)]), BATCH, 1000.0 + n)
    assert led.revision > 16
    oldest = led.oldest_watchable_revision
    assert oldest == led.revision - 16
    assert [e.revision for e in led.events_after(oldest)] == list(range(oldest + 1, led.revision + 1))
    with pytest.raises(RevisionGone) as err:
        led.events_after(oldest - 1)
    assert err.value.oldest == oldest
    with pytest.raises(RevisionAhead):
        led.events_after(led.revision + 1)


async def test_watcher_gets_backlog_then_live_events_in_order() -> None:
    led = make()
    led.sync(snapshot([yarn(1, 1)]), BATCH, 1000.0)
    sub = led.subscribe(from_revision=1)
    led.sync(snapshot([yarn(1, 1), yarn(1, 2)]), BATCH, 1001.0)
    got = await sub.next_batch(100, 1.0)
    assert [e.revision for e in got] == list(range(2, led.revision + 1))
    assert await sub.next_batch(100, 0.05) == []  # quiet: the caller sends a bookmark
    led.notice("eviction", "evicted", {"key": "x"})
    got = await sub.next_batch(100, 1.0)
    assert got[0].type is EventType.NOTICE and got[0].obj.fields == (("key", "x"),)
    led.unsubscribe(sub)
    assert led.watcher_count == 0


async def test_slow_watcher_is_dropped_not_buffered_without_bound() -> None:
    led = make()
    dropped: list[object] = []
    slow = led.subscribe(on_drop=dropped.append)
    fast = led.subscribe(on_drop=dropped.append)
    for n in range(20):  # queue size 16
        led.notice("x", str(n))
        if n % 4 == 0:
            await fast.next_batch(100, 0.0)
    assert led.watcher_count == 1 and led.dropped_watchers == 1
    assert dropped == [slow], "the drop callback given to subscribe is called once, with the one dropped"
    got = await slow.next_batch(100, 0.0)
    assert [e.revision for e in got] == list(range(1, 17))  # what was queued is still delivered, in order
    with pytest.raises(WatcherDropped, match="16 events behind at revision 17"):
        await slow.next_batch(100, 0.0)
    rest = []
    while batch := await fast.next_batch(100, 0.0):
        rest += batch
    assert rest[-1].revision == 20


def test_view_is_immutable_and_cached_per_revision() -> None:
    led = make()
    led.sync(snapshot([yarn(1, 1)]), BATCH, 1000.0)
    v1 = led.view()
    assert led.view() is v1
    led.sync(snapshot([yarn(1, 1), yarn(1, 2)]), BATCH, 1001.0)
    v2 = led.view()
    assert v2 is not v1 and len(v1.allocations) == 1 and len(v2.allocations) == 2
    with pytest.raises(AttributeError):
        v1.revision = 5  # type: ignore[misc]


def test_decommissioning_node_reports_no_batch() -> None:
    from agent.state import DrainPhase, DrainStatus, Trigger

    led = make()
    schedulable(led)
    led.transition(
        Trigger.DRAIN,
        1,
        drain=DrainStatus(
            phase=DrainPhase.WAIT_ALLOCATIONS, deadline=2000.0, previous_batch_allocatable=BATCH
        ),
    )
    led.sync(snapshot([]), BATCH, 1001.0)
    assert led.node.lifecycle is Lifecycle.DECOMMISSIONING and led.node.batch_allocatable == Resources()
    r = led.admit(request(1, 1), 1)
    assert r.refusal is Refusal.NOT_SCHEDULABLE
    assert led.ack_recovery(1, led.revision).lifecycle is Lifecycle.DECOMMISSIONING


def test_bounded_memory_under_a_thousand_churning_allocations() -> None:
    led = make(ring=64)
    for n in range(30):
        ws = [yarn(1 + (i % 7), i + n * 10) for i in range(1000)]
        led.sync(snapshot(ws), BATCH, 1000.0 + n)
    assert len(led.view().allocations) == 1000
    assert len(led.events_after(led.oldest_watchable_revision)) == 64
    assert led.revision > 30_000
