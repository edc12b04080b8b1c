"""The gRPC server behind the unix socket runs only while someone is connected (`api.idle_stop_s`).

In-process: the agent's real ApiServer and gate on a real unix socket; the gate stops the server after
`idle_stop_s` with no connection and starts a fresh one for the next. The real agent process (threads and
wake-ups after an idle stop) is in tests/cost/test_cost_api_idle.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from apikit import short_dir
from test_api_server import Served, admit_req, collect, serve, until_synced, workload

from agent.api.client import AgentClient
from agent.api.server import ApiServer, ApiStartError

IDLE_S = 1.0
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


async def eventually(pred: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(0.05)
    return pred()


async def idle_stopped(api: ApiServer, stops: int = 0) -> bool:
    """The server is stopped, after at least `stops` idle stops by the gate."""
    return await eventually(lambda: api.gate is not None and api.gate.idle_stops >= stops
                            and api.server is None)


@pytest_asyncio.fixture
async def idle() -> AsyncIterator[Served]:
    with short_dir() as d:
        s = await serve(d, bookmark_interval_s=0.2, idle_stop_s=IDLE_S)
        try:
            yield s
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_every_rpc_works_against_an_idle_stopped_server(idle: Served) -> None:
    # Started and stopped once at start-up: nobody is connected yet.
    assert idle.server.server is None and idle.server.starts == 1
    idle.sync([workload(1, 1)])
    inc = idle.ledger.identity.incarnation
    async with AgentClient(idle.address) as c:
        view = await c.get_snapshot()
        assert view.revision == idle.ledger.revision and idle.server.starts == 2
        stream = c.watch(send_initial=True)
        await until_synced(stream)
        lifecycle, _ = await c.ack_recovery(3, inc, idle.ledger.revision)
        assert lifecycle.value == "SCHEDULABLE"
        r = await c.admit(admit_req(2, 1), 3)
        assert r.accepted, r
        live = await collect(stream, idle.ledger.revision)  # the admission, seen by the open Watch
        assert any(getattr(i.obj, "key", "") == admit_req(2, 1).key for i in live)
        await stream.aclose()
        assert (await c.status()).identity.node_id == "node-t"
    assert idle.server.starts == 2  # one server for the whole session, however many calls


async def test_a_held_watch_keeps_the_server_running_past_idle_stop_s(idle: Served) -> None:
    assert await idle_stopped(idle.server)
    gate = idle.server.gate
    assert gate is not None
    async with AgentClient(idle.address) as c:
        stream = c.watch(send_initial=True)
        await until_synced(stream)
        await asyncio.sleep(IDLE_S * 2.5)
        assert idle.server.server is not None and gate.idle_stops == 0
        assert (await anext(stream))  # bookmarks still flow
        await stream.aclose()
    del stream
    gc.collect()  # the closed channel keeps its connection while the stream's call object lives
    assert await idle_stopped(idle.server, stops=1)  # closed: stopped after idle_stop_s


async def test_a_connection_racing_a_stop_waits_for_it_and_gets_a_fresh_server(idle: Served) -> None:
    api = idle.server
    async with AgentClient(idle.address) as c:
        await c.get_snapshot()  # a server runs; the gate stops it idle_stop_s after this
    stopping = asyncio.Event()
    real_stop = api.stop_server
    waiting: list[int] = []

    async def slow_stop(grace: float | None = 0.5) -> None:
        stopping.set()
        # The client connects while the stop is under way. Not longer: our client (agent.api.client)
        # allows 100 ms for the server's first frame; a real idle stop takes ~4 ms, a start as long.
        await asyncio.sleep(0.05)
        assert api.gate is not None
        waiting.append(api.gate._open)
        await real_stop(grace)

    api.stop_server = slow_stop  # type: ignore[method-assign]
    await asyncio.wait_for(stopping.wait(), IDLE_S + 10)
    assert api.server is not None  # not stopped yet
    async with AgentClient(idle.address) as c:
        assert (await c.get_snapshot()).revision == idle.ledger.revision
    assert waiting == [1], "the connection did not arrive during the stop"
    assert api.starts == 3 and api.gate is not None and api.gate.idle_stops == 1


async def test_many_connections_at_once_on_a_stopped_server_start_it_once(idle: Served) -> None:
    assert await idle_stopped(idle.server)
    clients = [AgentClient(idle.address) for _ in range(20)]
    try:
        views = await asyncio.gather(*(c.get_snapshot() for c in clients))
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    assert {v.revision for v in views} == {idle.ledger.revision}
    assert idle.server.starts == 2


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> list[str]:
    out = []
    for task in Path("/proc/self/task").iterdir():
        try:
            out.append((task / "comm").read_text().strip())
        except FileNotFoundError:
            continue
    return sorted(out)


def _private_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(path))
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # HTTP/2 preface: the server answers with SETTINGS
        s.settimeout(5)
        return len(s.recv(64)) > 0


async def test_fifty_start_stop_cycles_leak_no_fd_and_no_thread(idle: Served) -> None:
    api = idle.server
    assert await idle_stopped(api)
    assert not any(t.startswith(("event_engine", "grpc_global_tim", "lifeguard")) for t in _threads())
    path = api.private_socket
    assert path is not None
    await api.ensure_running()
    assert _private_answers(path)
    await api.stop_server()
    await asyncio.sleep(0.5)
    fds, threads = _fds(), _threads()
    for _ in range(50):
        await api.ensure_running()
        assert _private_answers(path)
        await api.stop_server()
    assert api.starts == 52
    assert await eventually(lambda: _fds() <= fds and len(_threads()) <= len(threads), 10), (
        fds, _fds(), threads, _threads())
    assert not any(t.startswith(("event_engine", "grpc_global_tim", "lifeguard")) for t in _threads())


async def test_peer_credentials_still_decide_after_a_restart() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to call as another user")
    with short_dir() as d:
        d.chmod(0o755)
        s = await serve(d, idle_stop_s=IDLE_S, socket_group=str(NOBODY), socket_mode=0o660)
        try:
            assert await idle_stopped(s.server)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(REPO / "tests" / "apisec" / "peer_client.py"), s.address,
                str(NOBODY), str(NOBODY), cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()[-2000:]
            codes = json.loads(out.decode().strip().splitlines()[-1])
            assert codes["GetSnapshot"] == "OK" and codes["Admit"] == "PERMISSION_DENIED", codes
            assert s.server.starts == 2 and s.server.policy.denied == 4
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_with_a_tcp_listener_the_server_never_stops() -> None:
    with short_dir() as d:
        s = await serve(d, idle_stop_s=IDLE_S, tcp_address="127.0.0.1:0")
        try:
            await asyncio.sleep(IDLE_S * 2)
            assert s.server.server is not None and s.server.starts == 1
            async with AgentClient(s.server.addresses[1]) as c:
                assert (await c.get_snapshot()).revision == s.ledger.revision
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_idle_stop_0_never_stops() -> None:
    with short_dir() as d:
        s = await serve(d, idle_stop_s=0)
        try:
            await asyncio.sleep(IDLE_S * 1.5)
            assert s.server.server is not None
        finally:
            await s.server.stop(0)
            await s.ledger.close()


def test_idle_stop_s_is_bounded() -> None:
    from agent.config.api import ApiConfig

    for bad in (-1, 0.5, 86401):
        with pytest.raises(ValueError, match=r"api\.idle_stop_s"):
            ApiConfig(idle_stop_s=bad)
    assert ApiConfig().idle_stop_s == 60




async def test_the_first_call_waits_for_a_start_the_agents_busy_loop_delays(idle: Served) -> None:
    """The start runs on the agent's loop, which a long tick or CPU throttling can hold: our client's first
    call after an idle stop must wait for it, not fail after gRPC's 100 ms minimum connect timeout."""
    assert await idle_stopped(idle.server)
    loop = asyncio.get_running_loop()
    outcome: list[object] = []

    def call_from_another_thread() -> None:
        async def call() -> None:
            async with AgentClient(idle.address) as c:
                outcome.append((await c.get_snapshot()).revision)

        try:
            asyncio.run(call())
        except Exception as err:  # the outcome under test
            outcome.append(err)

    caller = loop.run_in_executor(None, call_from_another_thread)
    time.sleep(0.5)  # the agent's loop is busy (blocked) while the gate asks it to start the server
    await caller
    assert outcome == [idle.ledger.revision], outcome
    assert idle.server.starts == 2


async def test_a_start_queued_before_shutdown_does_not_run_after_it(idle: Served) -> None:
    """The gate may ask for a start just before the agent stops the API: it must not leave a fresh gRPC
    server running after shutdown (nothing would stop it)."""
    assert await idle_stopped(idle.server)
    await idle.server.stop(0)
    with pytest.raises(ApiStartError, match="shutting down"):
        await idle.server.ensure_running()
    assert idle.server.server is None
