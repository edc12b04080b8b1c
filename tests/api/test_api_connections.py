"""The node API's connection-level behaviour on grpclib: limits grpc core used to apply, now applied by
`agent.api.rpc`, and connections that come and go.

In-process: the agent's real ApiServer on a real unix socket, called with the grpcio client.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from apikit import short_dir
from grpc_health.v1 import health_pb2, health_pb2_grpc
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from test_api_server import admit_req, expect_error, serve, until_synced

from agent.api import rpc
from agent.api.client import AgentCallError, AgentClient, Marker
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_one_connection_carries_more_streams_than_h2s_default_of_100() -> None:
    with short_dir() as d:
        # a connection may hold a quarter of max_concurrent_rpcs: 250 here
        s = await serve(d, max_streams=150, max_concurrent_rpcs=1000, bookmark_interval_s=0.2)
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
            own = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection
            async with grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as ch, \
                    grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as ch2, \
                    grpc.aio.insecure_channel(f"unix:{s.address}", options=own) as other:
                # one call per connection (a connection may hold a quarter of the limit, or 100 if fewer)
                ask = health_pb2.HealthCheckRequest()
                held = [health_pb2_grpc.HealthStub(c).Watch(ask) for c in (ch, ch2)]
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
            await asyncio.sleep(0.5)
            assert _fds() <= fds + 1, (fds, _fds())  # +1: the executor's thread may hold one
            async with AgentClient(s.address) as c:
                assert (await c.get_snapshot()).revision == s.ledger.revision
        finally:
            await s.server.stop(0)
            await s.ledger.close()


# ---- per-connection guards (agent/api/connection.py), spoken to in raw HTTP/2 with h2 ---------------------

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


def test_each_connection_announces_a_quarter_of_max_concurrent_rpcs_as_its_stream_limit() -> None:
    with short_dir() as d:
        s, stop = _serve_in_thread(d)
        try:
            sock, conn = _h2_client(s.address)
            with sock:
                # h2's initial SETTINGS say 100; ours follows at once in a second SETTINGS frame
                sock.settimeout(1)
                events = _events_until(sock, conn, type(None), timeout=2)
            limits = [e.changed_settings[SettingCodes.MAX_CONCURRENT_STREAMS].new_value for e in events
                      if isinstance(e, h2.events.RemoteSettingsChanged)
                      and SettingCodes.MAX_CONCURRENT_STREAMS in e.changed_settings]
            assert limits and limits[-1] == 1024 // 4, limits
        finally:
            stop()


def test_a_peer_resetting_streams_in_a_loop_is_sent_goaway_and_closed() -> None:
    with short_dir() as d:
        s, stop = _serve_in_thread(d)
        try:
            sock, conn = _h2_client(s.address)
            with sock:
                with contextlib.suppress(OSError):
                    for _ in range(1000):
                        sid = conn.get_next_available_stream_id()
                        conn.send_headers(sid, [*GRPC_HEADERS[:3], (":path", "/grpc.health.v1.Health/Check"),
                                                *GRPC_HEADERS[3:]])
                        conn.reset_stream(sid)
                        sock.sendall(conn.data_to_send())
                events = _events_until(sock, conn, h2.events.ConnectionTerminated)
            ended = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
            assert ended and ended[0].error_code == ErrorCodes.ENHANCE_YOUR_CALM, events[-5:]
            health = asyncio.run(_health(s.address))  # the others are still served
            assert health == health_pb2.HealthCheckResponse.SERVING
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


def test_a_peer_that_stops_reading_stops_being_read() -> None:
    """It could otherwise make the agent queue answers (PING ACKs) without bound."""
    with short_dir() as d:
        s, stop = _serve_in_thread(d)
        try:
            sock, conn = _h2_client(s.address)
            with sock:
                sock.setblocking(False)
                ping = b""
                for n in range(1000):
                    conn.ping(n.to_bytes(8, "big"))
                    ping += conn.data_to_send()
                sent, blocked_at = 0, None
                end = time.monotonic() + 20
                while time.monotonic() < end:
                    try:
                        sent += sock.send(ping)
                    except BlockingIOError:
                        if blocked_at is None:
                            blocked_at = time.monotonic()
                        elif time.monotonic() - blocked_at > 1.5:
                            break  # still full after 1.5 s: the server no longer reads us
                        time.sleep(0.05)
                    else:
                        blocked_at = None
                assert blocked_at is not None and time.monotonic() - blocked_at > 1.5, sent
                assert sent < 64 << 20, sent
            assert asyncio.run(_health(s.address)) == health_pb2.HealthCheckResponse.SERVING
        finally:
            stop()


def test_a_request_body_that_stalls_is_ended_and_frees_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "BODY_TIMEOUT_S", 0.5)
    with short_dir() as d:
        s, stop = _serve_in_thread(d)
        try:
            sock, conn = _h2_client(s.address)
            with sock:
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [*GRPC_HEADERS[:3], (":path", "/coloc.v1.NodeAgent/GetStatus"),
                                        *GRPC_HEADERS[3:]])
                conn.send_data(sid, struct.pack(">?I", False, 100) + b"x" * 10)  # 10 of 100 bytes
                sock.sendall(conn.data_to_send())
                events = _events_until(sock, conn, h2.events.StreamEnded)
            trailers = [dict(e.headers) for e in events
                        if isinstance(e, h2.events.TrailersReceived | h2.events.ResponseReceived)]
            assert any(t.get(b"grpc-status") == b"4" for t in trailers), trailers
            limits = s.server.limits
            assert limits is not None
            end = time.monotonic() + 5  # the handler's bookkeeping runs just after its trailers went out
            while limits.in_flight and time.monotonic() < end:
                time.sleep(0.05)
            assert (limits.in_flight, limits.receiving_bytes) == (0, 0)
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


async def test_a_malformed_mutation_from_a_caller_who_may_not_mutate_is_denied_and_audited() -> None:
    with short_dir() as d:
        s = await serve(d, mutate_uids=(os.getuid() + 1,))  # this test's own uid may not mutate
        try:
            async with grpc.aio.insecure_channel(f"unix:{s.address}") as ch:
                admit = ch.unary_unary("/coloc.v1.NodeAgent/Admit", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await admit(b"\xff\xff\xff", timeout=5)
                assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert s.server.policy.denied == 1
        finally:
            await s.server.stop(0)
            await s.ledger.close()


def test_connections_past_max_connections_are_closed_and_the_room_comes_back() -> None:
    with short_dir() as d:
        s, stop = _serve_in_thread(d, max_connections=3)
        try:
            held = [_h2_client(s.address) for _ in range(3)]
            for sock, conn in held:  # each is served: the server's SETTINGS come
                assert any(isinstance(e, h2.events.RemoteSettingsChanged)
                           for e in _events_until(sock, conn, h2.events.RemoteSettingsChanged))
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as extra:
                extra.settimeout(5)
                extra.connect(s.address)
                # closed at once, nothing sent: our preface may already meet a closed socket
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    extra.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                    assert extra.recv(100) == b""
            held[0][0].close()
            end = time.monotonic() + 5
            status = None
            while status is None and time.monotonic() < end:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    status = asyncio.run(_health(s.address))
            assert status == health_pb2.HealthCheckResponse.SERVING
            for sock, _ in held[1:]:
                sock.close()
        finally:
            stop()


def test_max_connections_is_bounded() -> None:
    from agent.config.api import ApiConfig

    for bad in (0, 1_000_001):
        with pytest.raises(ValueError, match=r"api\.max_connections"):
            ApiConfig(max_connections=bad)
