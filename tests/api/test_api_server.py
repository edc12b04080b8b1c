"""The node API in-process over a real unix socket: every RPC, its error codes, limits and the socket itself.

The ledger here is fed hand-made snapshots; tests with real agent processes and real cgroups are in
test_api_agents.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from kit.api import Mirror, app_id, cid, short_dir
from kit.poll import until
from kit.snapshot import published
from servekit import BATCH, Served, admit_req, expect_error, serve, workload

from agent.api import convert
from agent.api.client import AgentCallError, AgentClient, Marker
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.api.server import ApiStartError, start_api_server
from agent.config.api import ApiConfig
from agent.published import ActionRecord, Board
from agent.state import AdmitRequest, EventType, Ledger, LedgerConfig, Lifecycle, Phase, Refusal
from agent.state.persist import StateStore
from qos.model import Resources, Source


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    with short_dir() as d:
        s = await serve(d, bookmark_interval_s=0.2)
        try:
            yield s
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def collect(stream: object, until: int) -> list[object]:
    """Items from a watch until a marker or event at revision ≥ `until`."""
    out: list[object] = []
    async for batch in stream:  # type: ignore[attr-defined]
        out += batch
        if any(getattr(i, "revision", -1) >= until for i in batch):
            return out
    return out


async def until_synced(stream: object) -> list[object]:
    out: list[object] = []
    async for batch in stream:  # type: ignore[attr-defined]
        out += batch
        if isinstance(batch[-1], Marker) and batch[-1].initial_sync_end:
            return out
    return out


def wire_fields(data: bytes) -> list[int]:
    """Top-level field numbers of a serialized message, in wire order."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        num, kind = key >> 3, key & 7
        out.append(num)
        if kind == 0:
            _, i = _varint(data, i)
        elif kind == 2:
            n, i = _varint(data, i)
            i += n
        else:
            raise AssertionError(f"unexpected wire type {kind}")
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


async def test_snapshot_lists_identity_node_applications_then_allocations(served: Served) -> None:
    served.sync([workload(2, 1), workload(1, 1), workload(1, 2)])
    async with AgentClient(served.address) as c:
        view = await c.get_snapshot()
        raw = await c._channel.unary_unary("/coloc.v1.NodeAgent/GetSnapshot")(b"")
    assert view.identity == convert.identity_from(convert.identity_pb(served.ledger.identity))
    assert view.identity.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert view.revision == served.ledger.revision
    assert [a.application_id for a in view.applications] == [app_id(1), app_id(2)]
    assert [a.key for a in view.allocations] == [
        f"yarn/{cid(1, 1)}",
        f"yarn/{cid(1, 2)}",
        f"yarn/{cid(2, 1)}",
    ]
    assert view.node.batch_allocatable == BATCH and view.node.lifecycle is Lifecycle.RECOVERING
    fields = wire_fields(raw)
    assert max(i for i, f in enumerate(fields) if f == 6) < min(i for i, f in enumerate(fields) if f == 7)
    # The cached pre-serialized snapshot is byte-for-byte what protobuf itself would produce.
    expected = pb.Snapshot(
        identity=convert.identity_pb(served.ledger.identity),
        revision=view.revision,
        oldest_watchable_revision=served.ledger.oldest_watchable_revision,
        taken_unix_ms=convert.ms(served.ledger.view().taken_at),
        node=convert.node_pb(served.ledger.node),
        applications=[convert.application_pb(a) for a in served.ledger.view().applications],
        allocations=[convert.allocation_pb(a) for a in served.ledger.view().allocations],
    )
    assert pb.Snapshot.FromString(raw) == expected


async def test_watch_send_initial_then_live_events_and_bookmarks(served: Served) -> None:
    served.sync([workload(1, 1), workload(1, 2)])
    rev = served.ledger.revision
    async with AgentClient(served.address) as c:
        stream = c.watch(send_initial=True)
        first = await until_synced(stream)
        assert [type(i.obj).__name__ for i in first[:-1]] == [
            "NodeRecord",
            "Application",
            "Allocation",
            "Allocation",
        ]
        assert all(i.type is EventType.ADDED and i.revision == rev for i in first[:-1])
        assert first[-1] == Marker(rev, True)
        served.sync([workload(1, 2, terminating=True)])
        live = await collect(stream, served.ledger.revision)
        assert [(i.type, i.reason) for i in live] == [(EventType.MODIFIED, ""), (EventType.DELETED, "gone")]
        assert live[0].obj.phase is Phase.TERMINATING
        quiet = await anext(stream)  # nothing happens: a bookmark at the current revision
        assert quiet == [Marker(served.ledger.revision, False)]
        await stream.aclose()


async def test_watch_resume_after_a_dropped_stream_loses_nothing(served: Served) -> None:
    served.sync([workload(1, 1)])
    async with AgentClient(served.address) as c:
        view = await c.get_snapshot()
        mirror = Mirror(view)
        stream = c.watch(incarnation=mirror.incarnation, from_revision=view.revision)
        for item in await anext(stream):
            mirror.apply(item)
        served.sync([workload(1, 1), workload(1, 2)])
        for item in await collect(stream, served.ledger.revision):
            mirror.apply(item)
        await stream.aclose()  # the stream drops; changes continue meanwhile
        served.sync([workload(1, 2, request_cpu=700), workload(3, 1)])
        served.ledger.notice("eviction", "evicted x", {"key": "x"})
        served.sync([workload(3, 1)])
        stream = c.watch(incarnation=mirror.incarnation, from_revision=mirror.revision)
        got = await until_synced(stream)
        await stream.aclose()
        for item in got:
            mirror.apply(item)
        assert got[-1] == Marker(served.ledger.revision, True)
        assert any(getattr(i, "type", None) is EventType.NOTICE for i in got)
        assert mirror.state_at(served.ledger.revision) == Mirror.of(await c.get_snapshot())


async def test_watch_errors(served: Served) -> None:
    served.sync([workload(1, 1)])
    inc = served.ledger.identity.incarnation
    async with AgentClient(served.address) as c:
        await expect_error(
            anext(c.watch(incarnation="another", from_revision=0)),
            grpc.StatusCode.FAILED_PRECONDITION,
            "incarnation_mismatch",
            "restarted",
        )
        await expect_error(
            anext(c.watch(from_revision=0)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
            "incarnation: required",
        )
        await expect_error(
            anext(c.watch(incarnation=inc, from_revision=99)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "revision_ahead",
            "from_revision",
        )
        call = c.watch_raw(pb.WatchRequest(incarnation=inc))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "start:" in (
            err.value.details() or ""
        )


async def test_ring_overflow_gives_out_of_range() -> None:
    with short_dir() as d:
        s = await serve(d, ring=16)
        try:
            for n in range(30):
                s.sync([workload(1, k) for k in range(1, n + 2)])
            inc = s.ledger.identity.incarnation
            async with AgentClient(s.address) as c:
                view = await c.get_snapshot()
                assert view.oldest_watchable_revision == s.ledger.revision - 16
                await expect_error(
                    anext(c.watch(incarnation=inc, from_revision=2)),
                    grpc.StatusCode.OUT_OF_RANGE,
                    "revision_gone",
                    "no longer in the event ring",
                )
                ok = c.watch(incarnation=inc, from_revision=view.oldest_watchable_revision)
                items = await collect(ok, view.revision)
                assert len([i for i in items if not isinstance(i, Marker)]) == 16
                await ok.aclose()
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_slow_watcher_is_cut_off_and_can_resume() -> None:
    with short_dir() as d:
        s = await serve(d, queue=16)
        try:
            inc = s.ledger.identity.incarnation
            async with AgentClient(s.address) as c:
                stream = c.watch(incarnation=inc, from_revision=0)
                assert await anext(stream) == [Marker(0, True)]
                s.sync([workload(1, k) for k in range(1, 200)])  # 200 events at once into a 16-event queue
                got: list[object] = []
                with pytest.raises(AgentCallError) as err:
                    async for batch in stream:
                        got += batch
                assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert err.value.reason == "watcher_dropped" and "resume" in err.value.details
                assert [i.revision for i in got] == list(range(1, 17))
                again = c.watch(incarnation=inc, from_revision=16)
                rest = await collect(again, s.ledger.revision)
                await again.aclose()
                assert [i.revision for i in rest if not isinstance(i, Marker)] == list(
                    range(17, s.ledger.revision + 1)
                )
                assert s.ledger.dropped_watchers == 1
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_stream_limit() -> None:
    with short_dir() as d:
        s = await serve(d, max_streams=2, max_concurrent_rpcs=8)
        try:
            async with AgentClient(s.address) as c:
                a = c.watch(send_initial=True)
                b = c.watch(send_initial=True)
                await anext(a)
                await anext(b)
                await expect_error(
                    anext(c.watch(send_initial=True)),
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "too_many_streams",
                    "limit 2",
                )
                assert (await c.get_snapshot()).revision == s.ledger.revision  # unary calls still served
                await a.aclose()
                assert await until(lambda: s.server.service.streams < 2, 5)  # a's slot given back
                c3 = c.watch(send_initial=True)
                assert isinstance((await until_synced(c3))[-1], Marker)
                await c3.aclose()
                await b.aclose()
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_message_size_limit() -> None:
    with short_dir() as d:
        s = await serve(d, max_message_bytes=8192)
        try:
            async with AgentClient(s.address) as c:
                big = AdmitRequest(
                    key=f"yarn/{cid(1, 1)}",
                    application_id=app_id(1),
                    source=Source.YARN,
                    resources=Resources(1, 1),
                    tags=tuple((f"k{n}", "v" * 500) for n in range(30)),
                )
                with pytest.raises(AgentCallError) as err:
                    await c.admit(big, 1)
                assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert s.ledger.revision == 0
        finally:
            await s.server.stop(0)
            await s.ledger.close()


async def test_admit_ack_and_fencing(served: Served) -> None:
    served.sync([])
    inc = served.ledger.identity.incarnation
    async with AgentClient(served.address) as c:
        r = await c.admit(admit_req(1, 1), 3)
        assert not r.accepted and r.refusal is Refusal.NOT_SCHEDULABLE and "AckRecovery" in r.message
        await expect_error(
            c.ack_recovery(3, "", served.ledger.revision),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
            "incarnation: required",
        )
        await expect_error(
            c.ack_recovery(3, inc, served.ledger.revision + 5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "revision_ahead",
            "applied_revision",
        )
        lifecycle, _ = await c.ack_recovery(3, inc, served.ledger.revision)
        assert lifecycle is Lifecycle.SCHEDULABLE
        r = await c.admit(admit_req(1, 1), 3)
        assert (
            r.accepted
            and not r.already_admitted
            and r.allocation
            and r.allocation.phase is Phase.PENDING_LAUNCH
        )
        # Durable before the answer: the state file already holds the launch.
        state = StateStore(served.dir / "state.json").load("node-t").state
        assert state is not None and [a.key for a in state.pending_launches] == [f"yarn/{cid(1, 1)}"]
        again = await c.admit(admit_req(1, 1), 3)
        assert again.accepted and again.already_admitted and again.revision == r.revision
        await expect_error(
            c.admit(admit_req(1, 2), 2),
            grpc.StatusCode.FAILED_PRECONDITION,
            "stale_epoch",
            "scheduler_epoch 2 is stale",
            "epoch 3",
        )
        await expect_error(c.ack_recovery(2, inc, 0), grpc.StatusCode.FAILED_PRECONDITION, "stale_epoch")
        full = await c.admit(admit_req(1, 3, cpu=1800), 4)
        assert (
            not full.accepted
            and full.refusal is Refusal.INSUFFICIENT_CPU
            and full.batch_free.milli_cpu == 1700
        )
        await expect_error(c.admit(admit_req(1, 4), 3), grpc.StatusCode.FAILED_PRECONDITION, "stale_epoch")
        await expect_error(
            c.admit(admit_req(1, 4), 5, incarnation="old"),
            grpc.StatusCode.FAILED_PRECONDITION,
            "incarnation_mismatch",
        )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            pb.AllocationSpec(
                key="k8s/x", application_id="a", source=pb.SOURCE_K8S, resources=pb.Resources(milli_cpu=1)
            ),
            "allocation.key",
        ),
        (
            pb.AllocationSpec(key="yarn/x", application_id="a", resources=pb.Resources(milli_cpu=1)),
            "allocation.source",
        ),
        (
            pb.AllocationSpec(
                key=f"yarn/{cid(1, 1)}", source=pb.SOURCE_YARN, resources=pb.Resources(milli_cpu=1)
            ),
            "allocation.application_id",
        ),
        (
            pb.AllocationSpec(
                key=f"yarn/{cid(1, 1)}",
                application_id=app_id(1),
                source=pb.SOURCE_YARN,
                resources=pb.Resources(milli_cpu=-5),
            ),
            "allocation.resources.milli_cpu",
        ),
    ],
)
async def test_bad_requests_name_the_field(served: Served, spec: pb.AllocationSpec, field: str) -> None:
    before = served.ledger.revision
    stub = pb_grpc.NodeAgentStub(grpc.aio.insecure_channel(f"unix:{served.address}"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Admit(pb.AdmitRequest(fence=pb.Fence(scheduler_epoch=1), allocation=spec))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(field + ":")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Admit(pb.AdmitRequest(allocation=spec))
    assert (err.value.details() or "").startswith("fence:")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.AckRecovery(pb.AckRecoveryRequest(fence=pb.Fence(scheduler_epoch=0), incarnation="x"))
    assert (err.value.details() or "").startswith("fence.scheduler_epoch:")
    assert served.ledger.revision == before and served.ledger.node.highest_epoch == 0


async def test_health_reflection_drain_validation_and_status(served: Served) -> None:
    served.sync([workload(1, 1)])
    served.ledger.notice("eviction", "evicted yarn/x to relieve memory", {"key": "yarn/x"})
    channel = grpc.aio.insecure_channel(f"unix:{served.address}")
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "coloc.v1.NodeAgent"):
        resp = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = refl.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    resp = await call.read()
    await call.done_writing()
    names = {s.name for s in resp.list_services_response.service}
    assert {"coloc.v1.NodeAgent", "grpc.health.v1.Health"} <= names
    stub = pb_grpc.NodeAgentStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Drain(pb.DrainRequest(fence=pb.Fence(scheduler_epoch=1)))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # no mode: the field is named
    assert (err.value.details() or "").startswith("mode:")
    async with AgentClient(served.address) as c:
        st = await c.status()
    assert st.identity.node_id == "node-t" and st.revision == served.ledger.revision
    assert [(n.phase, n.count, n.resources.milli_cpu) for n in st.allocations] == [(pb.PHASE_RUNNING, 1, 100)]
    assert [e.notice.kind for e in st.recent_notices] == ["eviction"]
    await channel.close()


async def test_status_shows_the_loops_last_actions() -> None:
    board = Board()
    rec = ActionRecord(
        at=time.time(),
        policy="memory",
        kind="evict",
        target="yarn/x",
        outcome="applied",
        reason="memory 91% ≥ 70%",
    )
    board.publish(published(tick=7, tick_duration_s=0.001, collect_duration_s=0.001, recent_actions=(rec,)))
    with short_dir() as d:
        ledger = Ledger.open(LedgerConfig(node_id="n", state_path=str(d / "s.json")))
        server = await start_api_server(ledger, ApiConfig(socket_path=str(d / "a.sock")), board=board)
        try:
            async with AgentClient(str(d / "a.sock")) as c:
                st = await c.status()
            assert st.tick == 7 and [(a.kind, a.target, a.reason) for a in st.recent_actions] == [
                ("evict", "yarn/x", "memory 91% ≥ 70%")
            ]
        finally:
            await server.stop(0)


async def test_socket_mode_group_and_path_checks() -> None:
    group = grp.getgrall()[-1]
    with short_dir() as d:
        ledger = Ledger.open(LedgerConfig(node_id="n", state_path=str(d / "s.json")))
        sub = d / "run" / "coloc"  # created 0750 (and the read socket's group) by the server
        path = sub / "agent.sock"
        server = await start_api_server(ledger, ApiConfig(socket_path=str(path), socket_group=group.gr_name))
        try:
            st = os.stat(path)
            assert (
                stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == group.gr_gid
            )
            admin = os.stat(sub / "admin.sock")  # beside it: root only
            assert stat.S_ISSOCK(admin.st_mode) and stat.S_IMODE(admin.st_mode) == 0o600
            assert admin.st_uid == os.getuid() and admin.st_gid == os.getgid()
            assert stat.S_IMODE(os.stat(sub).st_mode) == 0o750
            assert server.addresses == [f"unix:{path}"]
            assert [p.name for p in sub.iterdir() if p.name.startswith(".")] == []  # bind directories gone
            with pytest.raises(ApiStartError, match="another process is serving"):
                await start_api_server(ledger, ApiConfig(socket_path=str(path)))
        finally:
            await server.stop(0)
        assert not path.exists()  # removed on stop
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(path))
        stale.close()  # a socket file nobody listens on: left by a crash
        server = await start_api_server(ledger, ApiConfig(socket_path=str(path)))
        await server.stop(0)
        path.write_text("not a socket")
        with pytest.raises(ApiStartError, match="exists and is not a socket"):
            await start_api_server(ledger, ApiConfig(socket_path=str(path)))
        assert path.read_text() == "not a socket"
        with pytest.raises(ApiStartError, match="no such group"):
            await start_api_server(
                ledger, ApiConfig(socket_path=str(d / "x.sock"), socket_group="no-such-grp")
            )
    with pytest.raises(ValueError, match="socket_path: longer than"):
        ApiConfig(socket_path="/tmp/" + "x" * 120)
    with pytest.raises(ValueError, match="max_concurrent_rpcs"):
        ApiConfig(max_streams=10, max_concurrent_rpcs=10)


async def test_concurrent_admissions_never_overcommit(served: Served) -> None:
    served.sync([])
    inc = served.ledger.identity.incarnation
    async with AgentClient(served.address) as c:
        await c.ack_recovery(1, inc, served.ledger.revision)
        results = await asyncio.gather(
            *(c.admit(admit_req(1 + n // 10, n + 1, cpu=150), 1) for n in range(40)))
    accepted = [r for r in results if r.accepted]
    assert len(accepted) == 2000 // 150
    assert all(r.refusal is Refusal.INSUFFICIENT_CPU for r in results if not r.accepted)
    assert served.ledger.batch_allocated.milli_cpu == 150 * len(accepted) <= BATCH.milli_cpu


async def test_status_cli(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli.status import main

    served.sync([workload(1, 1, request_cpu=250)])
    served.ledger.notice("suppression", "BE cpuset shrunk to 1 CPU", {"cpus": "1"})
    assert await asyncio.to_thread(main, ["--socket", served.address]) == 0
    text = capsys.readouterr().out
    assert "node        node-t" in text and "lifecycle   RECOVERING" in text
    assert "yarn   RUNNING" in text and "250 milli-CPU" in text
    assert "BE cpuset shrunk to 1 CPU" in text
    assert await asyncio.to_thread(main, ["--socket", served.address, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lifecycle"] == "RECOVERING" and data["identity"]["node_id"] == "node-t"
    assert data["allocations"][0]["count"] == 1
    nobody = served.dir / "nobody.sock"
    assert await asyncio.to_thread(main, ["--socket", str(nobody), "--timeout", "1"]) == 1
    want = (f"coloc-agent status: no agent answers at {nobody} (no such socket); "
            "point at one with --socket PATH or --config FILE (the agent's config)\n")
    assert capsys.readouterr().err == want


async def test_a_socket_is_never_reachable_with_a_looser_mode_than_configured() -> None:
    """gRPC binds the path itself: the agent binds inside a 0700 directory and renames the socket into place
    with its mode set. A watcher polling the directory during many starts never sees the public path with
    another mode, nor the private directory with any access for group or others."""
    seen: set[tuple[str, int]] = set()
    stop = threading.Event()
    with short_dir() as d:
        run = d / "run"
        run.mkdir()

        def watch() -> None:
            while not stop.is_set():
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    for entry in os.scandir(run):
                        with contextlib.suppress(FileNotFoundError):
                            mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                            seen.add((entry.name if not entry.name.startswith(".") else ".private", mode))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        ledger = Ledger.open(LedgerConfig(node_id="n", state_path=str(d / "s.json")))
        try:
            for _ in range(20):
                server = await start_api_server(ledger, ApiConfig(socket_path=str(run / "agent.sock"),
                                                                  socket_mode=0o640))
                await server.stop(0)
        finally:
            stop.set()
            watcher.join(10)
            await ledger.close()
    assert {name for name, _ in seen} >= {"agent.sock", "admin.sock"}, seen
    assert {(n, m) for n, m in seen if n == "agent.sock"} == {("agent.sock", 0o640)}, seen
    assert {(n, m) for n, m in seen if n == "admin.sock"} == {("admin.sock", 0o600)}, seen
    assert all(m == 0o700 for n, m in seen if n == ".private"), seen
