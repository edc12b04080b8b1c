"""Node API cost over the unix socket: GetSnapshot latency with 1,000 allocations, Watch fan-out.

    python bench/api.py [--allocations 1000] [--calls 3000] [--events 20000] [--subscribers 100]

An agent-side process (this file with --serve) holds a real ledger and the real gRPC server; its
allocations are admitted through the API (Admit) before measuring, then reported running by a synthetic
source (precomputed workload lists fed to `ledger.sync`), which also changes three of them ten times a
second (ten times the agent's default tick rate), so snapshots are measured at moving revisions and with
ticks competing for the event loop.
The client process measures, side by side in one run:
  - GetSnapshot p50/p99 (call + protobuf parse) against the floor of the same socket: Health/Check;
  - the same calls, in blocks alternating with the agent's, against the floor of the stack: a bare
    `grpc.aio` server (this file with --serve-floor, the agent's server options) that answers GetSnapshot
    with the agent's own snapshot bytes, fixed, and Health/Check with nothing: no ledger, no churn;
  - events/s through Watch to 1 subscriber and to 100 subscribers (a burst of --events changes).
Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kit.api import admit_request, changes_socket
from kit.bench import finish, pct
from kit.snapshot import node_snapshot, yarn_container

from agent.api.authz import Listener
from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.server import server_options, start_api_server
from agent.config.api import ApiConfig
from agent.state import Ledger, LedgerConfig
from qos.model import NodeSnapshot, Resources, Workload

BIG = Resources(1 << 40, 1 << 60)
TARGET_SNAPSHOT_P99_MS = 2.0  # issue 24, at 1,000 allocations


def container_of(n: int) -> tuple[int, int]:
    """Allocation `n`'s application and container sequence number: 100 containers an application."""
    return 1 + n // 100, n + 1


def workloads(n: int, generation: int, touched: range) -> tuple[Workload, ...]:
    """The running containers as a source reports them; those in `touched` changed their requests."""
    return tuple(yarn_container(*container_of(i), cpu=None, mem=None,
                                request_cpu=100 + (generation % 7 if i in touched else 0),
                                request_mem=256 << 20)
                 for i in range(n))


def snapshot(ws: tuple[Workload, ...]) -> NodeSnapshot:
    return node_snapshot(ws, taken_at=time.time(), capacity=BIG, cpus=(0, 1))


# ---- the agent side ----------------------------------------------------------------------------------------


async def serve(sock: str, state: str, n: int, burst: int, churn_hz: float) -> None:
    ledger = Ledger.open(
        LedgerConfig(
            node_id="bench-node",
            state_path=state,
            ring_size=max(4096, 2 * burst),
            watch_queue_size=max(1024, 2 * burst),
        )
    )
    ledger.start_persistence()
    server = await start_api_server(ledger, ApiConfig(socket_path=sock, max_streams=256))
    ledger.sync(snapshot(()), BIG, time.time())
    ledger.ack_recovery(1, ledger.revision)
    loop = asyncio.get_running_loop()
    churn = asyncio.Event()
    go = asyncio.Event()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    loop.add_signal_handler(signal.SIGUSR2, churn.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    quiet = [workloads(n, g, range((g * 3) % n, (g * 3) % n + 3)) for g in range(16)]
    busy = [workloads(n, g, range((g * 50) % n, (g * 50) % n + 50)) for g in range(16)]
    print("READY", flush=True)
    # Allocations arrive through Admit (from the client), then "start": the source reports them.
    await churn.wait()
    churn.clear()
    gen = 0
    ledger.sync(snapshot(workloads(n, gen, range(0))), BIG, time.time())
    print(f"FILLED {ledger.revision} {len(ledger.view().allocations)}", flush=True)
    while not stop.is_set():
        if go.is_set():
            go.clear()
            start = ledger.revision
            while ledger.revision - start < burst:
                gen += 1
                ledger.sync(snapshot(busy[gen % len(busy)]), BIG, time.time())
                await asyncio.sleep(0)
            print(f"BURST {start} {ledger.revision}", flush=True)
        elif not churn.is_set() and churn_hz > 0:  # background churn: a few changes per tick
            gen += 1
            ledger.sync(snapshot(quiet[gen % len(quiet)]), BIG, time.time())
        await asyncio.sleep(1 / churn_hz if churn_hz > 0 else 0.1)
    await server.stop(0)
    await ledger.close()


# ---- the client side ---------------------------------------------------------------------------------------


async def serve_floor(sock: str, snapshot_file: str) -> None:
    """The stack's floor: grpc.aio with the agent's options, answering fixed bytes and doing nothing else."""
    data: bytes = Path(snapshot_file).read_bytes()
    serving = health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
    serving_bytes: bytes = serving.SerializeToString()
    server = grpc.aio.server(options=server_options(ApiConfig(socket_path=sock), Listener.READ))

    async def snapshot(request: bytes, context: object) -> bytes:
        return data

    async def check(request: bytes, context: object) -> bytes:
        return serving_bytes

    def unary(fn: Callable[[bytes, object], Awaitable[bytes]]) -> grpc.RpcMethodHandler[bytes, bytes]:
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=bytes, response_serializer=bytes)

    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("coloc.v1.NodeAgent", {"GetSnapshot": unary(snapshot)}),
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": unary(check)}),
    ))
    server.add_insecure_port(f"unix:{sock}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await stop.wait()
    await server.stop(0)


class Calls:
    """GetSnapshot and Health/Check latencies (ms) of one server, pooled over the blocks measured."""

    def __init__(self) -> None:
        self.snapshot: list[float] = []
        self.health: list[float] = []
        self.revisions: set[int] = set()
        self.last: pb.Snapshot | None = None

    def figures(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}snapshot_p50_ms": pct(self.snapshot, 50),
            f"{prefix}snapshot_p99_ms": pct(self.snapshot, 99),
            f"{prefix}health_p50_ms": pct(self.health, 50),
            f"{prefix}health_p99_ms": pct(self.health, 99),
        }


def measure(sock: str, calls: int, into: Calls) -> None:
    """GetSnapshot and Health/Check interleaved, through grpcio's blocking client: the lightest client of
    this language (a no-op call's p50 / p99 here: 0.77 / 1.22 ms blocking, 1.0 / 2.0 ms with `grpc.aio`;
    a C++ client of libgrpc++ 1.51 was slower still), so what is left is the server's."""
    channel = grpc.insecure_channel(f"unix:{sock}", options=[("grpc.max_receive_message_length", 64 << 20)])
    snap = channel.unary_unary("/coloc.v1.NodeAgent/GetSnapshot",
                               request_serializer=pb.GetSnapshotRequest.SerializeToString,
                               response_deserializer=pb.Snapshot.FromString)
    health = health_pb2_grpc.HealthStub(channel)
    hreq = health_pb2.HealthCheckRequest(service="coloc.v1.NodeAgent")
    sreq = pb.GetSnapshotRequest()
    for _ in range(200):
        snap(sreq)
        health.Check(hreq)
    for _ in range(calls):
        t = time.perf_counter()
        m = snap(sreq)
        into.snapshot.append((time.perf_counter() - t) * 1e3)
        into.revisions.add(m.revision)
        t = time.perf_counter()
        health.Check(hreq)
        into.health.append((time.perf_counter() - t) * 1e3)
    assert len(m.allocations) > 0
    into.last = m
    channel.close()


def latencies(sock: str, calls: int, workdir: str, blocks: int = 3) -> dict[str, float]:
    """The agent's figures and the floor's: `calls` each, in `blocks` alternating blocks."""
    channel = grpc.insecure_channel(f"unix:{sock}", options=[("grpc.max_receive_message_length", 64 << 20)])
    raw = channel.unary_unary("/coloc.v1.NodeAgent/GetSnapshot", request_serializer=bytes,
                              response_deserializer=bytes)(b"")
    channel.close()
    Path(f"{workdir}/snapshot.bin").write_bytes(raw)
    floor_sock = f"{workdir}/floor.sock"
    floor = subprocess.Popen(
        [sys.executable, __file__, "--serve-floor", floor_sock, f"{workdir}/snapshot.bin"],
        stdout=subprocess.PIPE, text=True,
    )
    agent, bare = Calls(), Calls()
    try:
        assert floor.stdout is not None and floor.stdout.readline().strip() == "READY"
        for _ in range(blocks):
            measure(sock, calls // blocks, agent)
            measure(floor_sock, calls // blocks, bare)
    finally:
        floor.terminate()
        floor.wait(10)
    assert agent.last is not None and bare.last is not None and bare.last.ByteSize() == len(raw)
    out = agent.figures()
    out.update(bare.figures("floor_"))
    out.update({
        "snapshot_bytes": agent.last.ByteSize(),
        "snapshot_allocations": len(agent.last.allocations),
        "snapshot_distinct_revisions": len(agent.revisions),
        "snapshot_p99_over_floor_ratio": round(out["snapshot_p99_ms"] / out["floor_snapshot_p99_ms"], 3),
    })
    return out


async def aio_latencies(sock: str, calls: int) -> dict[str, float]:
    """The same through `grpc.aio` (what an asyncio client pays on top)."""
    channel = grpc.aio.insecure_channel(
        f"unix:{sock}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    snap = channel.unary_unary(
        "/coloc.v1.NodeAgent/GetSnapshot",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.Snapshot.FromString,
    )
    health = health_pb2_grpc.HealthStub(channel)
    hreq = health_pb2.HealthCheckRequest(service="coloc.v1.NodeAgent")
    sreq = pb.GetSnapshotRequest()
    for _ in range(200):
        await snap(sreq)
        await health.Check(hreq)
    s_ms: list[float] = []
    h_ms: list[float] = []
    size = 0
    revisions = set()
    for _ in range(calls):  # interleaved, so both see the same machine
        t = time.perf_counter()
        m = await snap(sreq)
        s_ms.append((time.perf_counter() - t) * 1e3)
        revisions.add(m.revision)
        size = m.ByteSize()
        t = time.perf_counter()
        await health.Check(hreq)
        h_ms.append((time.perf_counter() - t) * 1e3)
    assert len(m.allocations) > 0
    await channel.close(None)
    assert size and revisions
    return {
        "aio_snapshot_p50_ms": pct(s_ms, 50),
        "aio_snapshot_p99_ms": pct(s_ms, 99),
        "aio_health_p50_ms": pct(h_ms, 50),
        "aio_health_p99_ms": pct(h_ms, 99),
    }


async def fanout(sock: str, agent: subprocess.Popen[str], subscribers: int, events: int) -> dict[str, float]:
    """Time from the burst's start until every subscriber has every event of it."""
    assert agent.stdout is not None
    # Several connections, as several schedulers would have. The subscribers only parse the protobuf
    # messages (no conversion), so the figure is the server's fan-out, not this client's Python.
    # Each channel its own connection: the read socket allows 16 streams per connection, and on one shared
    # connection the 17th Watch would wait for ever. 100 subscribers are 5 streams a connection.
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(f"unix:{sock}", options=own) for _ in range(min(subscribers, 20))]
    async with AgentClient(sock) as c:
        view = await c.get_snapshot()
    inc, start_rev = view.identity.incarnation, view.revision
    ready = asyncio.Event()
    synced = 0
    seen: list[list[tuple[int, float]]] = [[] for _ in range(subscribers)]  # (last revision, arrival)
    got = [0] * subscribers
    sync_end = pb.EVENT_TYPE_INITIAL_SYNC_END
    bookmark = pb.EVENT_TYPE_BOOKMARK

    async def sub(i: int) -> None:
        nonlocal synced
        watch = channels[i % len(channels)].unary_stream(
            "/coloc.v1.NodeAgent/Watch",
            request_serializer=pb.WatchRequest.SerializeToString,
            response_deserializer=pb.WatchResponse.FromString,
        )
        call = watch(pb.WatchRequest(incarnation=inc, from_revision=start_rev))
        async for resp in call:
            events = resp.events
            if events[-1].type == sync_end:
                synced += 1
                if synced == subscribers:
                    ready.set()
                continue
            if events[-1].type == bookmark:
                continue
            got[i] += len(events)
            seen[i].append((events[-1].revision, time.perf_counter()))

    tasks = [asyncio.create_task(sub(i)) for i in range(subscribers)]
    await ready.wait()
    t0 = time.perf_counter()
    os.kill(agent.pid, signal.SIGUSR1)
    line = await asyncio.to_thread(agent.stdout.readline)
    _, first, last = line.split()
    target = int(last)
    deadline = time.monotonic() + 120
    while not all(s and s[-1][0] >= target for s in seen):
        assert time.monotonic() < deadline, "subscribers did not get the whole burst"
        await asyncio.sleep(0.01)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for ch in channels:
        await ch.close(None)
    n = target - int(first)
    elapsed = max(next(at for rev, at in s if rev >= target) for s in seen) - t0
    assert min(got) >= n, "a subscriber missed events"
    return {
        "events": n,
        "per_subscriber_events_per_s": n / elapsed,
        "deliveries_per_s": n * subscribers / elapsed,
    }


async def client_main(args: argparse.Namespace, sock: str, agent: subprocess.Popen[str],
                      workdir: str) -> dict[str, object]:
    assert agent.stdout is not None
    async with AgentClient(changes_socket(sock)) as c:

        async def place(i: int) -> None:  # through the API, as a scheduler would place them
            r = await c.admit(
                admit_request(*container_of(i), cpu=100, mem=256 << 20, request_id=f"r{i}"), 1
            )
            assert r.accepted, r

        for lo in range(0, args.allocations, 50):
            await asyncio.gather(*(place(i) for i in range(lo, min(lo + 50, args.allocations))))
    os.kill(agent.pid, signal.SIGUSR2)  # they start; background churn begins
    filled = agent.stdout.readline().split()
    assert filled[0] == "FILLED" and int(filled[2]) == args.allocations, filled
    out: dict[str, object] = {"allocations": args.allocations, "calls": args.calls}
    out.update(await asyncio.to_thread(latencies, sock, args.calls, workdir))
    out.update(await aio_latencies(sock, args.calls))
    os.kill(agent.pid, signal.SIGUSR2)  # quiet: only the bursts from now on
    await asyncio.sleep(0.1)
    runs: dict[int, list[dict[str, float]]] = {1: [], args.subscribers: []}
    for _ in range(3):
        for s, results in runs.items():
            results.append(await fanout(sock, agent, s, args.events))
    one = statistics.median(r["per_subscriber_events_per_s"] for r in runs[1])
    many = statistics.median(r["per_subscriber_events_per_s"] for r in runs[args.subscribers])
    out.update(
        {
            "snapshot_over_health_p50_ratio": round(out["snapshot_p50_ms"] / out["health_p50_ms"], 2),  # type: ignore[operator]
            "watch_burst_events": int(runs[1][0]["events"]),
            "watch_events_per_s_1_subscriber": round(one),
            f"watch_events_per_s_per_subscriber_{args.subscribers}_subscribers": round(many),
            f"watch_deliveries_per_s_{args.subscribers}_subscribers": round(
                statistics.median(r["deliveries_per_s"] for r in runs[args.subscribers])
            ),
            "watch_fanout_cost_ratio": round(one / many, 2),
            "target_snapshot_p99_ms": TARGET_SNAPSHOT_P99_MS,
            "snapshot_p99_target_met": out["snapshot_p99_ms"] <= TARGET_SNAPSHOT_P99_MS,  # type: ignore[operator]
            "floor_snapshot_p99_target_met": out["floor_snapshot_p99_ms"] <= TARGET_SNAPSHOT_P99_MS,  # type: ignore[operator]
        }
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allocations", type=int, default=1000)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--churn-hz", type=float, default=10.0,
                   help="ledger syncs a second while latencies are measured (the agent's tick: 1; 0: none)")
    p.add_argument("--quick", action="store_true", help="smoke run for CI: 200 allocations, 10 subscribers")
    p.add_argument("--serve", nargs=2, metavar=("SOCKET", "STATE"), help=argparse.SUPPRESS)
    p.add_argument("--serve-floor", nargs=2, metavar=("SOCKET", "SNAPSHOT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.allocations, args.calls, args.events, args.subscribers = 200, 200, 2000, 10
    if args.serve_floor:
        asyncio.run(serve_floor(*args.serve_floor))
        return 0
    if args.serve:
        asyncio.run(serve(args.serve[0], args.serve[1], args.allocations, args.events, args.churn_hz))
        return 0
    with tempfile.TemporaryDirectory(prefix="coloc-bench-") as d:
        sock = f"{d}/agent.sock"
        agent = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                sock,
                f"{d}/state.json",
                "--allocations",
                str(args.allocations),
                "--events",
                str(args.events),
                "--churn-hz",
                str(args.churn_hz),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert agent.stdout is not None and agent.stdout.readline().strip() == "READY"
            out = asyncio.run(client_main(args, sock, agent, d))
        finally:
            agent.terminate()
            agent.wait(10)
    for k, v in out.items():
        print(f"{k:55} {v}")
    return finish("bench/api.py", out, ("snapshot_p99_ms", "floor_snapshot_p99_ms",
                                        "watch_events_per_s_1_subscriber"))


if __name__ == "__main__":
    sys.exit(main())
