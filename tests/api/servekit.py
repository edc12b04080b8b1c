"""The node API served in process over a real unix socket, on a ledger fed hand-made snapshots: what the API
tests share (the server, a YARN workload and its Admit request, an expected error)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
import pytest
from kit.api import admit_request
from kit.snapshot import node_snapshot, yarn_container

from agent.api.client import AgentCallError
from agent.api.server import ApiServer, start_api_server
from agent.config.api import ApiConfig
from agent.state import Ledger, LedgerConfig
from qos.model import NodeSnapshot, Resources, Workload

BATCH = Resources(2000, 4 << 30)


# YARN container `seq` of application `app` as the API tests place it: asking for 100 milli-CPU and 64 MiB
# unless `request_cpu` and `request_mem` say otherwise.
workload = partial(yarn_container, request_cpu=100, request_mem=64 << 20, cpu=None, mem=None)
# The scheduler's request for YARN container `seq` of application `app`: 300 milli-CPU unless `cpu` says.
admit_req = partial(admit_request, cpu=300)


def snap(ws: list[Workload]) -> NodeSnapshot:
    return node_snapshot(ws, taken_at=time.time(), capacity=Resources(4000, 8 << 30), cpus=(0, 1))


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
