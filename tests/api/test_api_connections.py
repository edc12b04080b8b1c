"""The node API's connection-level behaviour: gRPC core's limits as `api.*` sets them, and connections that
come and go (the abuse cases, against a real agent process: tests/apiabuse).

In-process: the agent's real ApiServer on real unix sockets, called with the grpcio client and in raw
HTTP/2 with h2.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from h2.settings import SettingCodes
from kit.api import short_dir
from kit.poll import until
from servekit import admit_req, expect_error, serve

from agent.api.client import AgentCallError, AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_calls_past_a_connections_stream_limit_queue_and_are_all_served() -> None:
    with short_dir() as d:
        s = await serve(d, max_concurrent_streams=4)
        try:
            async with grpc.aio.insecure_channel(f"unix:{s.address}") as ch:  # one HTTP/2 connection
                stub = health_pb2_grpc.HealthStub(ch)
                held = [stub.Watch(health_pb2.HealthCheckRequest()) for _ in range(3)]
                for h in held:
                    assert (await h.read()).status == health_pb2.HealthCheckResponse.SERVING
                calls = [pb_grpc.NodeAgentStub(ch).GetStatus(pb.GetStatusRequest(), timeout=10)
                         for _ in range(40)]  # one stream left: the rest wait their turn in the client
                assert len(await asyncio.gather(*calls)) == 40
                for h in held:
                    h.cancel()
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_calls_past_max_concurrent_rpcs_are_refused_and_the_slot_comes_back() -> None:
    with short_dir() as d:
        s = await serve(d, max_streams=1, max_concurrent_rpcs=2, bookmark_interval_s=0.2)
        try:
            own = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection
            async with grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as ch, \
                    grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as ch2, \
                    grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as other:
                ask = health_pb2.HealthCheckRequest()
                held = [health_pb2_grpc.HealthStub(c).Watch(ask) for c in (ch, ch2)]
                for h in held:
                    assert (await h.read()).status == health_pb2.HealthCheckResponse.SERVING
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await pb_grpc.NodeAgentStub(other).GetSnapshot(pb.GetSnapshotRequest(), timeout=5)
                assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # grpc.aio's own refusal
                held[0].cancel()

                async def served() -> bool:  # once the cancelled call's slot is given back
                    try:
                        await pb_grpc.NodeAgentStub(other).GetSnapshot(pb.GetSnapshotRequest(), timeout=5)
                    except grpc.aio.AioRpcError as e:
                        if e.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                            raise
                        return False
                    return True

                assert await until(served, 5)
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


async def test_connections_that_come_and_go_or_speak_garbage_leak_nothing() -> None:
    with short_dir() as d:
        s = await serve(d)
        try:
            path = Path(s.address)
            async with AgentClient(s.address) as c:
                await c.get_snapshot()  # first-use allocations out of the way
            fds = _fds()
            for n in range(50):
                async with AgentClient(s.address) as c:
                    await c.get_snapshot()
                garbage = b"GET / HTTP/1.1\r\n\r\n" if n % 2 else os.urandom(256)
                await asyncio.get_running_loop().run_in_executor(None, _raw, path, garbage)
            # +1: the executor's thread may hold one
            assert await until(lambda: _fds() <= fds + 1, 5), (fds, _fds())
            async with AgentClient(s.address) as c:
                assert (await c.get_snapshot()).revision == s.ledger.revision
        finally:
            await s.server.stop(0)
            await s.ledger.close()


# ---- in raw HTTP/2 with h2 ----------------------------------------------------------------------------

def _h2_client(path: str) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def _events_until(sock: socket.socket, conn: h2.connection.H2Connection, want: type,
                  timeout: float = 10.0) -> list[object]:
    """Frames from the server until an event of type `want`, the end of the connection, or `timeout`."""
    out: list[object] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not data:
            break
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            break
        out += events
        if any(isinstance(e, want) for e in events):
            break
    return out


GRPC_HEADERS = [(":method", "POST"), (":scheme", "http"), (":authority", "agent"),
                ("content-type", "application/grpc"), ("te", "trailers")]


def _serve_in_thread(d: Path, **cfg: object) -> tuple[Any, Callable[[], None]]:
    """The real server on its own event loop in a thread, so the test may block on raw sockets."""
    loop = asyncio.new_event_loop()
    served = loop.run_until_complete(serve(d, **cfg))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(served.server.stop(0), loop).result(10)
        asyncio.run_coroutine_threadsafe(served.ledger.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    return served, stop


def _announced_streams(path: str) -> list[int]:
    sock, conn = _h2_client(path)
    with sock:
        events = _events_until(sock, conn, h2.events.RemoteSettingsChanged, timeout=5)
    return [e.changed_settings[SettingCodes.MAX_CONCURRENT_STREAMS].new_value for e in events
            if isinstance(e, h2.events.RemoteSettingsChanged)
            and SettingCodes.MAX_CONCURRENT_STREAMS in e.changed_settings]


def test_each_connection_announces_its_listeners_stream_limit() -> None:
    with short_dir() as d:
        s, stop = _serve_in_thread(d, max_concurrent_streams=7, admin_max_concurrent_streams=70)
        try:
            assert _announced_streams(str(d / "agent.sock")) == [7]
            assert _announced_streams(s.address) == [70]  # the admin socket
        finally:
            stop()


async def _health(address: str) -> int:
    async with grpc.aio.insecure_channel(f"unix:{address}") as ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return int(r.status)


def test_a_frame_of_unknown_type_is_ignored_and_the_connection_lives_on() -> None:
    with short_dir() as d:
        s, stop = _serve_in_thread(d)
        try:
            sock, conn = _h2_client(s.address)
            with sock:
                _events_until(sock, conn, h2.events.RemoteSettingsChanged)
                sock.sendall(struct.pack(">I", 4)[1:] + bytes([0xFA, 0]) + struct.pack(">I", 0) + b"abcd")
                conn.ping(b"12345678")
                sock.sendall(conn.data_to_send())
                events = _events_until(sock, conn, h2.events.PingAckReceived)
            assert any(isinstance(e, h2.events.PingAckReceived) for e in events), events
        finally:
            stop()


async def test_stop_ends_open_connections_so_no_mutation_lands_after_it() -> None:
    with short_dir() as d:
        s = await serve(d)
        try:
            s.sync([])
            async with AgentClient(s.address) as c:
                await c.status()  # the connection is open
                before = s.ledger.view().node
                await s.server.stop(0)
                with pytest.raises(AgentCallError) as err:
                    await c.drain(before.highest_epoch + 5, timeout=3)
                assert err.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            after = s.ledger.view().node
            assert (after.highest_epoch, after.lifecycle) == (before.highest_epoch, before.lifecycle)
        finally:
            await s.ledger.close()


async def test_a_malformed_mutation_on_the_read_socket_is_denied_and_audited() -> None:
    with short_dir() as d:
        s = await serve(d)
        try:
            async with grpc.aio.insecure_channel(f"unix:{d / 'agent.sock'}") as ch:
                admit = ch.unary_unary("/coloc.v1.NodeAgent/Admit", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await admit(b"\xff\xff\xff", timeout=5)
                assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert s.server.policy.denied == 1
        finally:
            await s.server.stop(0)
            await s.ledger.close()
