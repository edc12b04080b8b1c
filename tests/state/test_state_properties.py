"""Property test: any sequence of ticks, admissions, acks and notices keeps the ledger's promises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.api import Mirror, admit_request
from statekit import snapshot, yarn

from agent.state import EventType, Ledger, LedgerConfig, Phase
from agent.state.records import Allocation, Application
from qos.model import Resources

BATCH = Resources(3000, 6 << 30)

workload = st.builds(
    lambda app, seq, cpu, term: yarn(app, seq, request_cpu=cpu, terminating=term),
    st.integers(1, 3),
    st.integers(1, 6),
    st.sampled_from([0, 100, 400]),
    st.booleans(),
)
op = st.one_of(
    st.tuples(
        st.just("tick"),
        st.lists(workload, max_size=8),
        st.sampled_from([{}, {"yarn": "down"}]),
        st.sampled_from([0.0, 5.0, 50.0]),
    ),
    st.tuples(st.just("admit"), st.integers(1, 3), st.integers(1, 6), st.sampled_from([100, 900, 2500])),
    st.tuples(st.just("ack"), st.integers(1, 3)),
    st.tuples(st.just("notice"), st.text(max_size=5)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_ledger_invariants(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    t = [1000.0]
    led = Ledger(
        LedgerConfig(node_id="p", state_path=None, pending_launch_ttl_s=30.0), boot_id="b", clock=lambda: t[0]
    )
    replica = Mirror(led.view())
    epoch = 1
    for o in ops:
        if o[0] == "tick":
            t[0] += o[3]
            led.sync(snapshot(o[1], stale=o[2]), BATCH, t[0])
        elif o[0] == "admit":
            req = admit_request(o[1], o[2], cpu=o[3], mem=1, request_id="")
            before = led.batch_allocated
            res = led.admit(req, epoch)
            if res.accepted and not res.already_admitted:
                assert (before + req.resources).fits_in(BATCH)  # never admitted past the batch budget
        elif o[0] == "ack":
            epoch = max(epoch, o[1])
            led.ack_recovery(epoch, led.revision)
        else:
            led.notice("x", o[1])
        # Events replay to the view, in order, with no gap; apps always precede their allocations.
        for ev in led.events_after(replica.revision):
            replica.apply(ev)
            if ev.type is not EventType.NOTICE and isinstance(ev.obj, Allocation | Application):
                assert ev.obj.revision == ev.revision
        view = led.view()
        assert replica.matches(view)
        keys = [a.key for a in view.allocations]
        assert len(keys) == len(set(keys))
        used = Resources()
        for a in view.allocations:
            used = used + a.resources
        assert used == led.batch_allocated
        assert {a.application_id for a in view.allocations} == {a.application_id for a in view.applications}
        assert all(a.phase is not Phase.PENDING_LAUNCH or a.scheduler_epoch >= 1 for a in view.allocations)
