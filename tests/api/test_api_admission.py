"""The Admit RPC asks the one admission rule (`qos.admission`) with the ledger's facts: the batch policy's
budget and the stale sources of the last tick, what the node's schedulers hold, the lifecycle. Driven over a
real unix socket against the in-process server; the ledger is fed hand-made snapshots and budgets, as the
tick loop's LedgerFeed does (tests/k8s/test_k8s_admission_agent.py drives the whole agent process)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from kit.api import short_dir
from servekit import BATCH, Served, admit_req, serve, snap, workload

from agent.api import convert
from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.state import Refusal
from qos.admission import AdmissionFacts, BatchBudget, admit
from qos.model import Resources


@pytest_asyncio.fixture
async def acked() -> AsyncIterator[Served]:
    """A served ledger a scheduler acknowledged (SCHEDULABLE), before any tick."""
    with short_dir() as d:
        s = await serve(d)
        try:
            async with AgentClient(s.address) as c:
                await c.ack_recovery(1, s.ledger.identity.incarnation, s.ledger.revision)
            yield s
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_no_tick_yet_is_an_unknown_origin(acked: Served) -> None:
    async with AgentClient(acked.address) as c:
        r = await c.admit(admit_req(1, 1), 1)
    assert not r.accepted and r.refusal is Refusal.BUDGET_UNKNOWN
    assert r.message == "batch origin unknown: no tick has run yet"


HELD = "origin dropped to 500m / 0 B by more than 50%; confirming for 3s of 120s"


@pytest.mark.parametrize(("stale", "budget", "refusal", "message"), [
    ({"yarn": "no answer for 40s"}, BatchBudget(BATCH), Refusal.BUDGET_UNKNOWN,
     "stale data (yarn: no answer for 40s): the batch room is not known"),
    ({}, BatchBudget(None), Refusal.BUDGET_UNKNOWN, "batch origin unknown: not read or computed yet"),
    ({}, BatchBudget(BATCH, held=HELD), Refusal.BUDGET_UNKNOWN, f"batch origin held: {HELD}"),
    # 2 containers hold 1400 m; another allocator's koord-batch entry holds 1000 m of the 2000 m origin
    ({}, BatchBudget(BATCH, others=Resources(1000, 0)), Refusal.INSUFFICIENT_CPU,
     "batch overcommitted by 400m CPU / 0 B memory "
     "(batch origin 2000m, other allocators 1000m, allocated 1400m)"),
    ({}, BatchBudget(BATCH, others=Resources(301, 0)), Refusal.INSUFFICIENT_CPU,
     "requests 300 milli-CPU, 299 free (batch origin 2000, other allocators 301, allocated 1400)"),
])
async def test_each_refusal_says_why_and_changes_nothing(acked: Served, stale: dict[str, str],
                                                         budget: BatchBudget, refusal: Refusal,
                                                         message: str) -> None:
    ws = [workload(1, 1, request_cpu=700), workload(1, 2, request_cpu=700)]
    acked.ledger.sync(dataclasses.replace(snap(ws), stale=stale), budget, time.time())
    before = acked.ledger.view()
    request = admit_req(2, 1, cpu=300)
    stub = pb_grpc.NodeAgentStub(grpc.aio.insecure_channel(f"unix:{acked.address}"))
    raw = await stub.Admit(pb.AdmitRequest(fence=pb.Fence(scheduler_epoch=1),
                                           allocation=convert.allocation_spec_pb(request)))
    assert not raw.accepted and raw.message == message
    assert raw.refusal == convert.REFUSAL_TO_PB[refusal]
    assert acked.ledger.view() == before and acked.ledger.revision == raw.revision, "nothing recorded"
    async with AgentClient(acked.address) as c:
        r = await c.admit(request, 1)
        assert not r.accepted and r.refusal is refusal and r.message == message
        # The next tick's facts are fresh, the origin known and in force: the same request fits.
        acked.ledger.sync(snap(ws), BatchBudget(BATCH), time.time())
        ok = await c.admit(admit_req(2, 1, cpu=300), 1)
        assert ok.accepted and ok.batch_free == Resources(300, BATCH.memory_bytes - 3 * (64 << 20))


async def test_other_allocators_shrink_what_the_node_reports(acked: Served) -> None:
    acked.ledger.sync(snap([]), BatchBudget(BATCH, others=Resources(500, 1 << 30)), time.time())
    async with AgentClient(acked.address) as c:
        view = await c.get_snapshot()
        assert view.node.batch_allocatable == Resources(1500, 3 << 30), "origin minus other allocators"
        # Unknown next tick (no origin read): the last allocatable stays reported, admissions are refused.
        acked.ledger.sync(snap([]), BatchBudget(None), time.time())
        assert (await c.get_snapshot()).node.batch_allocatable == Resources(1500, 3 << 30)
        assert (await c.admit(admit_req(1, 1), 1)).refusal is Refusal.BUDGET_UNKNOWN


amounts = st.integers(min_value=0, max_value=10_000)
pairs = st.builds(Resources, amounts, amounts)


@given(request=pairs, origin=st.none() | pairs, others=pairs, allocated=pairs,
       held=st.none() | st.just("drop being confirmed"),
       stale=st.dictionaries(st.sampled_from(["kubelet", "yarn"]), st.just("old"), max_size=1),
       closed=st.none() | st.just("node is recovering"))
def test_the_rule_never_admits_past_the_origin_nor_on_doubt(request: Resources, origin: Resources | None,
                                                             others: Resources, allocated: Resources,
                                                             held: str | None, stale: dict[str, str],
                                                             closed: str | None) -> None:
    verdict = admit(request, AdmissionFacts(BatchBudget(origin, held, others), allocated, stale, closed))
    assert verdict.accepted is (verdict.refusal is None) and verdict.reason
    if verdict.accepted:
        assert origin is not None and held is None and not stale and closed is None
        total = allocated + others + request
        assert total.fits_in(origin), "admitted past the origin"
    elif origin is not None and held is None and not stale and closed is None:
        assert not (allocated + others + request).fits_in(origin), f"refused a fit: {verdict.reason}"
