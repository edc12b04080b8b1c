"""The node API's connection-level behaviour on grpclib: limits grpc core used to apply, now applied by
`agent.api.rpc`, and connections that come and go.

In-process: the agent's real ApiServer on a real unix socket, called with the grpcio client.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import grpc
import pytest
from apikit import short_dir
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_api_server import admit_req, expect_error, serve, until_synced

from agent.api.client import AgentClient, Marker
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


async def test_one_connection_carries_more_streams_than_h2s_default_of_100() -> None:
    with short_dir() as d:
        s = await serve(d, max_streams=150, max_concurrent_rpcs=300, bookmark_interval_s=0.2)
        try:
            async with AgentClient(s.address) as c:  # one channel: one HTTP/2 connection
                streams = [c.watch(send_initial=True) for _ in range(150)]
                synced = await asyncio.wait_for(asyncio.gather(*(until_synced(w) for w in streams)), 30)
                assert all(isinstance(items[-1], Marker) for items in synced)
                assert s.server.service.streams == 150
                for w in streams:
                    await w.aclose()
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_calls_past_max_concurrent_rpcs_are_refused_and_the_slot_comes_back() -> None:
    with short_dir() as d:
        s = await serve(d, max_streams=1, max_concurrent_rpcs=2, bookmark_interval_s=0.2)
        try:
            # Two connections: one connection's stream limit is max_concurrent_rpcs too, and a client
            # queues calls past it instead of sending them.
            async with grpc.aio.insecure_channel(f"unix:{s.address}") as ch, \
                    grpc.aio.insecure_channel(f"unix:{s.address}",
                                              options=[("grpc.use_local_subchannel_pool", 1)]) as other:
                health = health_pb2_grpc.HealthStub(ch)
                held = [health.Watch(health_pb2.HealthCheckRequest()) for _ in range(2)]
                for h in held:
                    assert (await h.read()).status == health_pb2.HealthCheckResponse.SERVING
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await pb_grpc.NodeAgentStub(other).GetSnapshot(pb.GetSnapshotRequest(), timeout=5)
                assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "api.max_concurrent_rpcs 2" in (err.value.details() or "")
                held[0].cancel()
                await asyncio.sleep(0.2)
                await pb_grpc.NodeAgentStub(other).GetSnapshot(pb.GetSnapshotRequest(), timeout=5)
                held[1].cancel()
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_a_response_larger_than_max_message_bytes_is_refused_naming_the_setting() -> None:
    with short_dir() as d:
        s = await serve(d, max_message_bytes=4096)
        try:
            s.sync([])
            async with AgentClient(s.address) as c:
                await c.ack_recovery(1, s.ledger.identity.incarnation, s.ledger.revision)
                for n in range(60):
                    assert (await c.admit(admit_req(n, 1, cpu=10), 1)).accepted
                await expect_error(c.get_snapshot(), grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                                   "api.max_message_bytes (4096)")
                assert (await c.status()).node.node_id == "node-t"  # small answers still go out
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_many_connections_at_once_are_all_served() -> None:
    with short_dir() as d:
        s = await serve(d)
        try:
            clients = [AgentClient(s.address) for _ in range(200)]
            try:
                views = await asyncio.gather(*(c.get_snapshot() for c in clients))
            finally:
                await asyncio.gather(*(c.close() for c in clients))
            assert {v.revision for v in views} == {s.ledger.revision}
        finally:
            await s.server.stop(0)
            await s.ledger.close()


def _raw(path: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(4096):
            out += chunk
        return out


async def test_connections_that_come_and_go_or_speak_garbage_leak_nothing_and_start_no_thread() -> None:
    with short_dir() as d:
        s = await serve(d)
        try:
            path = Path(s.address)
            async with AgentClient(s.address) as c:
                await c.get_snapshot()  # first-use allocations out of the way
            fds, threads = _fds(), _threads()
            for n in range(50):
                async with AgentClient(s.address) as c:
                    await c.get_snapshot()
                garbage = b"GET / HTTP/1.1\r\n\r\n" if n % 2 else os.urandom(256)
                await asyncio.get_running_loop().run_in_executor(None, _raw, path, garbage)
            await asyncio.sleep(0.5)
            assert _fds() <= fds + 1, (fds, _fds())  # +1: the executor's thread may hold one
            async with AgentClient(s.address) as c:
                assert (await c.get_snapshot()).revision == s.ledger.revision
            assert _threads() <= threads + 1  # the executor above; the server itself starts none
        finally:
            await s.server.stop(0)
            await s.ledger.close()
