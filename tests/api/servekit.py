"""The node API served in process over a real unix socket, on a ledger fed hand-made snapshots: what the API
tests share (the server, a YARN workload and its Admit request, an expected error)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from kit.api import app_id, cid
from kit.snapshot import node_snapshot

from agent.api.client import AgentCallError
from agent.api.server import ApiServer, start_api_server
from agent.config.api import ApiConfig
from agent.state import AdmitRequest, Ledger, LedgerConfig
from qos.model import NodeSnapshot, Resources, Source, Tier, Workload

BATCH = Resources(2000, 4 << 30)


def workload(app: int, seq: int, cpu: int = 100, terminating: bool = False) -> Workload:
    c = cid(app, seq)
    return Workload(
        key=f"yarn/{c}",
        name=c,
        source=Source.YARN,
        tier=Tier.BESTEFFORT,
        be=True,
        priority=5000,
        cgroup=f"besteffort/hadoop-yarn/{c}",
        requests=Resources(cpu, 64 << 20),
        app_id=app_id(app),
        terminating=terminating,
    )


def snap(ws: list[Workload]) -> NodeSnapshot:
    return node_snapshot(ws, taken_at=time.time(), capacity=Resources(4000, 8 << 30), cpus=(0, 1))


def admit_req(app: int, seq: int, cpu: int = 300) -> AdmitRequest:
    return AdmitRequest(
        key=f"yarn/{cid(app, seq)}",
        application_id=app_id(app),
        source=Source.YARN,
        resources=Resources(cpu, 64 << 20),
        request_id=f"r-{app}-{seq}",
    )


@dataclass
class Served:
    ledger: Ledger
    server: ApiServer
    dir: Path
    address: str

    def sync(self, ws: list[Workload]) -> None:
        self.ledger.sync(snap(ws), BATCH, time.time())


async def serve(d: Path, ring: int = 4096, queue: int = 1024, **api: object) -> Served:
    ledger = Ledger.open(
        LedgerConfig(
            node_id="node-t", state_path=str(d / "state.json"), ring_size=ring, watch_queue_size=queue
        )
    )
    ledger.start_persistence()
    cfg = ApiConfig(socket_path=str(d / "agent.sock"), **api)  # type: ignore[arg-type]
    server = await start_api_server(ledger, cfg)
    return Served(ledger, server, d, str(d / "admin.sock"))  # the admin socket serves every method


async def expect_error(coro: object, code: grpc.StatusCode, reason: str, *needles: str) -> AgentCallError:
    with pytest.raises(AgentCallError) as err:
        await coro  # type: ignore[misc]
    assert err.value.code is code, err.value
    assert err.value.reason == reason, err.value
    for n in needles:
        assert n in err.value.details, err.value.details
    return err.value
