"""Drain / Recommission over a real gRPC server on a unix socket (in this process), and the drain metrics
read from the same ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from drainkit import be, decided, snapshot, with_drain

from agent.api.client import AgentCallError, AgentClient, target
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.api.server import ApiServer, start_api_server
from agent.config.api import ApiConfig
from agent.decommission.controller import DrainController
from agent.metrics.collector import ColocCollector
from agent.metrics.hub import ActionTally
from agent.published import Board
from agent.state.ledger import Ledger, LedgerConfig
from qos.model import Resources

BATCH = Resources(2000, 1 << 30)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Ledger, ApiServer]]:
    ledger = Ledger.open(LedgerConfig("node-api", state_path=str(tmp_path / "state.json")), boot_id="b")
    ledger.sync(snapshot(be("a"), be("b")), BATCH, ledger.now())
    server = await start_api_server(ledger, ApiConfig(socket_path=str(tmp_path / "a.sock")))
    yield ledger, server
    await server.stop(1.0)
    await ledger.close()


async def test_drain_and_recommission_over_grpc(served: tuple[Ledger, ApiServer]) -> None:
    _, server = served
    async with AgentClient(server.admin_address) as c:
        resp = await c.drain(2, graceful=True, timeout_s=120, request_id="op-1", reason="kernel upgrade")
        assert resp.lifecycle == pb.LIFECYCLE_DECOMMISSIONING
        assert resp.remaining_allocations == 2
        assert resp.drain.has_deadline and resp.drain.deadline_unix_ms == resp.drain.started_unix_ms + 120_000
        assert resp.drain.previous_batch_allocatable.milli_cpu == BATCH.milli_cpu
        again = await c.drain(2, graceful=True, timeout_s=5, request_id="op-1")
        assert again.drain.deadline_unix_ms == resp.drain.deadline_unix_ms, "idempotent on the request id"
        with pytest.raises(AgentCallError) as err:
            await c.drain(1, graceful=True, timeout_s=5, request_id="op-2")
        assert err.value.code is grpc.StatusCode.FAILED_PRECONDITION and err.value.reason == "stale_epoch"
        st = await c.status()
        assert st.node.drain.allocations_left == 2 and st.node.batch_allocatable.milli_cpu == 0
        back = await c.recommission(2, request_id="op-3")
        assert back.lifecycle == pb.LIFECYCLE_SCHEDULABLE
        assert (await c.status()).node.batch_allocatable.milli_cpu == BATCH.milli_cpu


@pytest.mark.parametrize(("request_", "field"), [
    (pb.DrainRequest(fence=pb.Fence(scheduler_epoch=1)), "mode:"),
    (pb.DrainRequest(mode=pb.DRAIN_MODE_GRACEFUL), "fence:"),
    (pb.DrainRequest(fence=pb.Fence(scheduler_epoch=0), mode=pb.DRAIN_MODE_GRACEFUL),
     "fence.scheduler_epoch:"),
    (pb.DrainRequest(fence=pb.Fence(scheduler_epoch=1), mode=pb.DRAIN_MODE_GRACEFUL,
                     timeout_seconds=1 << 40), "timeout_seconds:"),
    (pb.DrainRequest(fence=pb.Fence(scheduler_epoch=1), mode=pb.DRAIN_MODE_GRACEFUL,
                     request_id="bad id"), "request_id:"),
])
async def test_bad_drain_requests_are_invalid_argument_naming_the_field(
        served: tuple[Ledger, ApiServer], request_: pb.DrainRequest, field: str) -> None:
    ledger, server = served
    rev = ledger.revision
    async with grpc.aio.insecure_channel(target(server.admin_address)) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.NodeAgentStub(ch).Drain(request_)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(field)
    assert ledger.revision == rev and ledger.node.drain.deadline is None, "nothing changed"


async def test_metrics_show_lifecycle_deadline_and_allocations_left(served: tuple[Ledger, ApiServer]) -> None:
    ledger, server = served
    ctl = DrainController(ledger)
    collector = ColocCollector(Board(), version="t", top_n=5, max_label_values=50, actions=ActionTally(),
                               ledger_view=ledger.view)

    def values() -> dict[str, float]:
        return {f"{s.name}{dict(s.labels)}": s.value for m in collector.collect() for s in m.samples}

    assert "coloc_node_drain_allocations_left{}" not in values()
    async with AgentClient(server.admin_address) as c:
        resp = await c.drain(1, graceful=True, timeout_s=600)
    snap = with_drain(ctl, snapshot(be("a")))
    ledger.sync(snap, BATCH, ledger.now())
    ctl.on_tick(snap, decided(snap, BATCH), [])
    v = values()
    assert v["coloc_node_lifecycle_state{'state': 'decommissioning'}"] == 1
    assert v["coloc_node_drain_deadline_timestamp_seconds{}"] == pytest.approx(
        resp.drain.deadline_unix_ms / 1000, abs=0.001)
    assert v["coloc_node_drain_allocations_left{}"] == 1
