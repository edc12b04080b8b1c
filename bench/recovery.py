"""Scheduler-side recovery time: real agent processes, and replayed endpoints at a larger scale.

    python bench/recovery.py [--sizes 10,25,50] [--allocations 100] [--replayed 200[,2000,10000]] [--repeat 3]

Real: N `coloc-agent run` processes (started by the acceptance tests' harness, tests/kit/fleet.py),
each with its own socket, node id, state file and private cgroup root holding --allocations allocations:
80 % container cgroups found by the agent's cgroup scanner, 20 % launches admitted through the API. A
scheduler restart is timed: `Recovery(...)` from start to Running (every node snapshotted, applied,
watched and acknowledged). Side by side, the floor: GetSnapshot from the same N agents at the same
parallelism, nothing applied.

Replayed (labelled as such): snapshots and watch streams recorded from 10 of the real agents (while
their cgroups changed), served byte for byte by 200 endpoints (or each size in --replayed) in two replay
processes; node ids, incarnations and keys are rewritten per endpoint with equal-length byte substitutions
(so the recorded protobuf stays valid and no key repeats across nodes). Only the recovery client is
measured there, with its peak RSS during each recovery (VmHWM, reset before it).

Prints one JSON object on its last line, with recovery / floor for each size. Needs root and writable
cgroups, and a file-descriptor limit above the largest --replayed (the soft limit is raised to the hard).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from kit.api import admit_request, cid
from kit.bench import finish, progress
from kit.fleet import Agent, start_all, stop_all
from kit.realcg import RealRoot

from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.config.api import ApiConfig
from agent.recovery import NodeState, Recovery, RecoveryConfig, SchedulerState

TS = b"1700000000000"
RECORDED = 10
BOOKMARK_S = ApiConfig().bookmark_interval_s  # an idle agent's bookmark interval, as deployed


# ---- real agents -------------------------------------------------------------------------------------------


def setup_agents(root: RealRoot, d: Path, n: int, per_node: int) -> list[Agent]:
    # The agent's default bookmark interval (the test fleet's is 0.5 s): the recorded streams are what agents
    # send as deployed.
    agents = [Agent(root, d, f"node-{i:02d}", {"loop.interval_s": 1.0, "api.bookmark_interval_s": BOOKMARK_S})
              for i in range(n)]
    containers = per_node * 4 // 5
    for i, a in enumerate(agents):
        for s in range(containers):
            a.add_container(1 + i, s + 1)
    start_all(agents)
    return agents


async def admit_pending(agents: list[Agent], per_node: int) -> None:
    first = Recovery([a.address for a in agents], RecoveryConfig(epoch=1))
    await first.start()
    assert await first.wait_running() is SchedulerState.RUNNING
    await first.stop()
    pending = per_node - per_node * 4 // 5

    async def one(i: int, a: Agent) -> None:
        async with AgentClient(a.address) as c:
            for s in range(pending):
                app = 500 + i
                r = await c.admit(admit_request(app, s + 1, cpu=10, mem=16 << 20, request_id=""), 1)
                assert r.accepted, r

    await asyncio.gather(*(one(i, a) for i, a in enumerate(agents)))


async def time_recovery(addresses: list[str], epoch: int, parallel: int, expect: int | None = None) -> float:
    """Seconds until a scheduler at `epoch` recovered every node at `addresses`, with no conflict and, given
    `expect`, that many allocations in all (the replayed endpoints' counts are their recordings')."""
    rec = Recovery(addresses, RecoveryConfig(epoch=epoch, parallel=parallel))
    t0 = time.perf_counter()
    await rec.start()
    state = await rec.wait_running()
    elapsed = time.perf_counter() - t0
    totals = rec.cluster.totals()
    await rec.stop()
    assert state is SchedulerState.RUNNING and totals["recovered"] == len(addresses), totals
    assert totals["conflicts"] == 0 and all(
        n.state is NodeState.RECOVERED for n in rec.cluster.nodes.values()
    ), totals
    assert expect is None or totals["allocations"] == expect, totals
    return elapsed


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> int:
    """Resets this process's peak RSS (VmHWM) to its current RSS, which it returns in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes `pids` so far (all their threads)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def recovery_and_floor(out: dict[str, object], name: str, label: str, addrs: list[str],
                             epochs: range, parallel: int, expect: int | None = None,
                             replay: Replay | None = None) -> float:
    """Recovery of `addrs` (once per epoch in `epochs`) and the floor of their snapshots: the medians in `out`
    as `<name>_recovery_s`, `<name>_snapshot_floor_s` and their ratio, and the client's peak RSS during a
    recovery (the largest; the RSS before it beside), and the client process's CPU seconds in each (all its
    threads: less disturbed than wall time by other load on the machine); returns the recovery's median.
    Given the replay processes (`replay`, replayed endpoints), also their CPU seconds in each, and the
    protocol floor: the recovery's own calls with nothing applied (see `time_protocol_floor`); the replay
    processes are started anew for each measurement. Each measurement starts once the last one's connections
    are closed (`settle`)."""
    rec, floor, peak, before, rec_cpu, floor_cpu = [], [], [], [], [], []
    proto, rec_srv, floor_srv, proto_srv = [], [], [], []
    sockets = open_sockets()
    for epoch in epochs:
        pids = replay.restart() if replay else []
        gc.collect()  # the last run's cluster (a cycle with its tasks) is not counted in this one's peak
        before.append(reset_peak_rss())
        cpu, srv = time.process_time(), cpu_seconds(pids)
        rec.append(await time_recovery(addrs, epoch, parallel, expect))
        rec_cpu.append(time.process_time() - cpu)
        rec_srv.append(cpu_seconds(pids) - srv)
        peak.append(_status_kib("VmHWM"))
        settled = await settle(sockets)
        pids = replay.restart() if replay else []
        cpu, srv = time.process_time(), cpu_seconds(pids)
        floor.append(await time_snapshot_floor(addrs, parallel))
        floor_cpu.append(time.process_time() - cpu)
        floor_srv.append(cpu_seconds(pids) - srv)
        settled = max(settled, await settle(sockets))
        line = (f"{label}: recovery {rec[-1]:.3f}s ({rec_cpu[-1]:.2f} s client CPU), snapshot floor "
                f"{floor[-1]:.3f}s ({floor_cpu[-1]:.2f} s)")
        if replay:
            pids = replay.restart()
            srv = cpu_seconds(pids)
            proto.append(await time_protocol_floor(addrs, parallel, epoch))
            proto_srv.append(cpu_seconds(pids) - srv)
            settled = max(settled, await settle(sockets))
            line += (f", protocol floor {proto[-1]:.3f}s; endpoints' CPU {rec_srv[-1]:.2f} / "
                     f"{floor_srv[-1]:.2f} / {proto_srv[-1]:.2f} s")
        progress(f"{line}, client peak RSS {peak[-1] >> 10} MiB (from {before[-1] >> 10}); connections "
                 f"closed within {settled:.1f} s of each")
    out[f"{name}_recovery_s"] = round(statistics.median(rec), 3)
    out[f"{name}_snapshot_floor_s"] = round(statistics.median(floor), 3)
    out[f"{name}_recovery_over_floor_ratio"] = round(statistics.median(rec) / statistics.median(floor), 2)
    out[f"{name}_client_peak_rss_mib"] = round(max(peak) / 1024, 1)
    out[f"{name}_recovery_client_cpu_s"] = round(statistics.median(rec_cpu), 3)
    out[f"{name}_floor_client_cpu_s"] = round(statistics.median(floor_cpu), 3)
    out[f"{name}_client_rss_before_mib"] = round(min(before) / 1024, 1)
    if replay:
        out[f"{name}_protocol_floor_s"] = round(statistics.median(proto), 3)
        out[f"{name}_recovery_over_protocol_floor_ratio"] = round(
            statistics.median(rec) / statistics.median(proto), 2)
        out[f"{name}_recovery_endpoints_cpu_s"] = round(statistics.median(rec_srv), 3)
        out[f"{name}_floor_endpoints_cpu_s"] = round(statistics.median(floor_srv), 3)
        out[f"{name}_protocol_floor_endpoints_cpu_s"] = round(statistics.median(proto_srv), 3)
    return statistics.median(rec)


def open_sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, closed by now
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return n


async def settle(sockets: int, timeout_s: float = 60.0) -> float:
    """Waits until this process has no more than `sockets` open sockets: every connection of the last
    measurement closed. gRPC tears a closed channel's connection down some time after its objects are freed,
    on its own threads and this loop (1.4-1.7 s at 10,000 nodes), which would otherwise run into the next
    measurement. Returns the seconds waited."""
    gc.collect()  # anything of the last measurement left in a cycle is freed before the wait
    t0 = time.perf_counter()
    while open_sockets() > sockets:
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"bench/recovery.py: connections open {timeout_s:.0f} s after a measurement")
        await asyncio.sleep(0.02)
    return time.perf_counter() - t0


def _channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"unix:{address}",
                                     options=[("grpc.max_receive_message_length", 64 << 20)])


async def _snapshot(ch: grpc.aio.Channel) -> pb.Snapshot:
    """GetSnapshot on `ch`, decoded as a client does."""
    call = ch.unary_unary(
        "/coloc.v1.NodeAgent/GetSnapshot",
        request_serializer=pb.GetSnapshotRequest.SerializeToString,
        response_deserializer=pb.Snapshot.FromString,
    )
    snap: pb.Snapshot = await call(pb.GetSnapshotRequest())
    return snap


async def time_snapshot_floor(addresses: list[str], parallel: int) -> float:
    sem = asyncio.Semaphore(parallel)
    t0 = time.perf_counter()

    async def one(a: str) -> None:
        async with sem:
            ch = _channel(a)
            await _snapshot(ch)
            await ch.close(None)

    await asyncio.gather(*(one(a) for a in addresses))
    return time.perf_counter() - t0


async def time_protocol_floor(addresses: list[str], parallel: int, epoch: int) -> float:
    """The recovery's calls with nothing applied, at the same parallelism: per endpoint GetSnapshot, Watch
    from its revision read to INITIAL_SYNC_END, AckRecovery; the streams stay open until every endpoint is
    through (as the recovery's do), then end. What the protocol's three calls cost on the wire and in
    grpc.aio, as the snapshot floor is what GetSnapshot alone costs."""
    sem = asyncio.Semaphore(parallel)
    opened: list[tuple[grpc.aio.Channel, grpc.aio.UnaryStreamCall[pb.WatchRequest, pb.WatchResponse]]] = []
    t0 = time.perf_counter()

    async def one(a: str) -> None:
        async with sem:
            ch = _channel(a)
            snap = await _snapshot(ch)
            watch = ch.unary_stream(
                "/coloc.v1.NodeAgent/Watch", request_serializer=pb.WatchRequest.SerializeToString,
                response_deserializer=pb.WatchResponse.FromString,
            )
            call = watch(pb.WatchRequest(incarnation=snap.identity.incarnation, from_revision=snap.revision))
            opened.append((ch, call))
            synced = False
            while not synced:
                msg = await call.read()
                assert isinstance(msg, pb.WatchResponse), a
                synced = any(e.type == pb.EVENT_TYPE_INITIAL_SYNC_END for e in msg.events)
            ack = ch.unary_unary(
                "/coloc.v1.NodeAgent/AckRecovery", request_serializer=pb.AckRecoveryRequest.SerializeToString,
                response_deserializer=pb.AckRecoveryResponse.FromString,
            )
            fence = pb.Fence(scheduler_id="bench", scheduler_epoch=epoch)
            await ack(pb.AckRecoveryRequest(fence=fence, incarnation=snap.identity.incarnation,
                                            applied_revision=snap.revision))

    await asyncio.gather(*(one(a) for a in addresses))
    elapsed = time.perf_counter() - t0
    for ch, call in opened:
        call.cancel()
        await ch.close(None)
    return elapsed


# ---- recording and replay ---------------------------------------------------------------------------


async def record(agent: Agent, seconds: float) -> tuple[bytes, list[bytes], str]:
    """GetSnapshot bytes, then the raw Watch responses from its revision while the node's cgroups change."""
    ch = grpc.aio.insecure_channel(f"unix:{agent.address}")
    raw = ch.unary_unary(
        "/coloc.v1.NodeAgent/GetSnapshot", request_serializer=pb.GetSnapshotRequest.SerializeToString,
        response_deserializer=None,  # raw bytes: the recording is what the agent sent
    )
    snap_bytes: bytes = await raw(pb.GetSnapshotRequest())
    snap = pb.Snapshot.FromString(snap_bytes)
    watch = ch.unary_stream("/coloc.v1.NodeAgent/Watch", request_serializer=pb.WatchRequest.SerializeToString,
                           response_deserializer=None)
    call = watch(pb.WatchRequest(incarnation=snap.identity.incarnation, from_revision=snap.revision))
    messages: list[bytes] = []

    async def reader() -> None:
        async for m in call:
            messages.append(m)

    task = asyncio.create_task(reader())
    n = int(agent.node_id.split("-")[1])
    for s in range(5):  # the node keeps changing: two containers start, one ends, ...
        agent.add_container(900 + n, s + 1)
        if s % 2:
            agent.remove_container(f"yarn/{cid(1 + n, s)}")
        await asyncio.sleep(seconds / 5)
    call.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await ch.close(None)
    return snap_bytes, messages, snap.identity.incarnation


def rewrite(data: bytes, subs: list[tuple[bytes, bytes]]) -> bytes:
    for old, new in subs:
        assert len(old) == len(new)
        data = data.replace(old, new)
    return data


def write_endpoints(d: Path, recordings: list[tuple[str, bytes, list[bytes], str]], count: int) -> None:
    for k in range(count):
        node, snap, stream, inc = recordings[k % len(recordings)]
        subs = [
            (node.encode(), f"r{k:06d}".encode()),
            (inc.encode(), str(uuid.uuid4()).encode()),
            (TS, f"17{k:011d}".encode()),
        ]
        ep = d / f"ep-{k:04d}"
        ep.mkdir()
        (ep / "snapshot.bin").write_bytes(rewrite(snap, subs))
        (ep / "stream.bin").write_bytes(
            b"".join(len(m).to_bytes(4, "big") + rewrite(m, subs) for m in stream)
        )


async def replay_serve(d: Path, lo: int, hi: int) -> None:
    """Serve endpoints lo..hi-1 of `d`, each on its own socket, from the recorded bytes."""
    servers = []
    for k in range(lo, hi):
        ep = d / f"ep-{k:04d}"
        snap = (ep / "snapshot.bin").read_bytes()
        data = (ep / "stream.bin").read_bytes()
        msgs, i = [], 0
        while i < len(data):
            n = int.from_bytes(data[i : i + 4], "big")
            msgs.append(data[i + 4 : i + 4 + n])
            i += 4 + n
        parsed = pb.Snapshot.FromString(snap)
        last = max(
            [parsed.revision] + [e.revision for m in msgs for e in pb.WatchResponse.FromString(m).events]
        )
        servers.append(
            await _replay_server(ep.with_suffix(".sock"), snap, msgs, parsed.identity.incarnation, last)
        )
    print("READY", flush=True)
    await asyncio.Event().wait()


async def _replay_server(sock: Path, snap: bytes, msgs: list[bytes], inc: str, last: int) -> grpc.aio.Server:
    idle = pb.WatchResponse(events=[pb.Event(type=pb.EVENT_TYPE_BOOKMARK, revision=last)])
    bookmark = idle.SerializeToString()

    async def get_snapshot(req: bytes, ctx: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return snap

    async def watch(req: pb.WatchRequest, ctx: grpc.aio.ServicerContext[bytes, bytes]):  # type: ignore[no-untyped-def]
        if req.incarnation != inc:
            await ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "incarnation")
        for m in msgs:
            yield m
        while True:  # the recording ends here: the stream stays open, as an idle node's, with its bookmarks
            await asyncio.sleep(BOOKMARK_S)
            yield bookmark

    async def ack(
        req: pb.AckRecoveryRequest, ctx: grpc.aio.ServicerContext[bytes, bytes]
    ) -> pb.AckRecoveryResponse:
        return pb.AckRecoveryResponse(lifecycle=pb.LIFECYCLE_SCHEDULABLE, revision=last)

    raw = lambda b: b  # noqa: E731
    handler = grpc.method_handlers_generic_handler(
        "coloc.v1.NodeAgent",
        {
            "GetSnapshot": grpc.unary_unary_rpc_method_handler(
                get_snapshot, request_deserializer=raw, response_serializer=raw
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                watch, request_deserializer=pb.WatchRequest.FromString, response_serializer=raw
            ),
            "AckRecovery": grpc.unary_unary_rpc_method_handler(
                ack,
                request_deserializer=pb.AckRecoveryRequest.FromString,
                response_serializer=pb.AckRecoveryResponse.SerializeToString,
            ),
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{sock}")
    await server.start()
    return server


# ---- the run ----------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, d: Path, root: RealRoot) -> dict[str, object]:
    sizes = [int(s) for s in args.sizes.split(",")]
    replayed = [int(s) for s in args.replayed.split(",")]
    out: dict[str, object] = {
        "allocations_per_node": args.allocations,
        "parallel": args.parallel,
        "repeat": args.repeat,
    }
    t0 = time.perf_counter()
    agents = setup_agents(root, d, max(sizes), args.allocations)
    progress(f"{len(agents)} agents up")
    try:
        await admit_pending(agents, args.allocations)
        progress("launches admitted")
        out["setup_s"] = round(time.perf_counter() - t0, 1)
        epoch = 10
        for n in sizes:
            epochs = range(epoch + 1, epoch + 1 + args.repeat)
            epoch += args.repeat
            addrs = [a.address for a in agents[:n]]
            rec = await recovery_and_floor(out, f"real_{n}_nodes", f"{n} real nodes", addrs, epochs,
                                           args.parallel, n * args.allocations)
            out[f"real_{n}_nodes_ms_per_node"] = round(1000 * rec / n, 1)
        recordings = []
        for a in agents[:RECORDED]:
            snap, msgs, inc = await record(a, 1.0)
            recordings.append((a.node_id, snap, msgs, inc))
            progress(f"recorded {a.node_id}: {len(msgs)} watch messages")
        out["recorded_stream_messages"] = sum(len(r[2]) for r in recordings)
    finally:
        stop_all(agents)

    ep_dir = d / "replay"
    ep_dir.mkdir()
    write_endpoints(ep_dir, recordings, max(replayed))
    for n in replayed:
        await measure_replayed(out, args, ep_dir, n)
    out["replayed_label"] = (
        f"replayed: endpoints serving snapshots and watch streams recorded from {RECORDED} real agents, "
        "ids rewritten per endpoint"
    )
    out["target_real_50_nodes_s"] = 3.0
    out["target_replayed_200_nodes_s"] = 5.0
    out["target_replayed_2000_nodes_s"] = 5.0
    out["target_replayed_10000_nodes_s"] = 15.0
    out["target_recovery_over_floor_ratio"] = 2.0
    out["target_client_peak_rss_mib"] = 2048
    return out


async def measure_replayed(out: dict[str, object], args: argparse.Namespace, ep_dir: Path, n: int) -> None:
    """Recovery and floor against endpoints 0..n-1 of `ep_dir`, served by two replay processes."""
    replay = Replay(ep_dir, n)
    try:
        addrs = [str(ep_dir / f"ep-{k:04d}.sock") for k in range(n)]
        expect = sum(
            len(pb.Snapshot.FromString((ep_dir / f"ep-{k:04d}" / "snapshot.bin").read_bytes()).allocations)
            for k in range(n)
        )
        await recovery_and_floor(out, f"replayed_{n}_nodes", f"{n} replayed", addrs,
                                 range(100, 100 + args.repeat), args.parallel, replay=replay)
        out[f"replayed_{n}_allocations_in_snapshots"] = expect
    finally:
        replay.stop()


class Replay:
    """The two processes serving endpoints 0..n-1 of `ep_dir`, started anew for each measurement: a process
    that has served one round of connections needs more CPU for the next (its 5,000 grpc.aio servers, ~20 %
    more at 10,000 endpoints), which would be charged to whichever measurement came later."""

    def __init__(self, ep_dir: Path, n: int) -> None:
        self.ep_dir = ep_dir
        self.n = n
        self._procs: list[subprocess.Popen[str]] = []

    def restart(self) -> list[int]:
        """The processes' pids, once both serve."""
        self.stop()
        half = self.n // 2
        self._procs = [
            subprocess.Popen([sys.executable, __file__, "--replay-serve", str(self.ep_dir), str(lo), str(hi)],
                             stdout=subprocess.PIPE, text=True)
            for lo, hi in ((0, half), (half, self.n))
        ]
        for s in self._procs:
            assert s.stdout is not None and s.stdout.readline().strip() == "READY"
        return [s.pid for s in self._procs]

    def stop(self) -> None:
        for s in self._procs:
            s.terminate()
        for s in self._procs:
            s.wait(30)
            if s.stdout is not None:
                s.stdout.close()
        self._procs = []


def raise_fd_limit(need: int) -> None:
    """The soft limit on open files raised to the hard one; a clear error when even that is below `need`
    (one socket per endpoint in the client, a listener and a connection per endpoint in the servers)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise SystemExit(f"bench/recovery.py: --replayed needs {need} open files, the hard limit is {hard} "
                         "(ulimit -Hn)")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10,25,50")
    p.add_argument("--allocations", type=int, default=100)
    p.add_argument("--replayed", default="200", help="replayed endpoints, a size or sizes (2000,10000)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parallel", type=int, default=RecoveryConfig(epoch=1).parallel,
                   help="nodes in initial sync at once, for the recovery and the floors alike "
                   "(default: the recovery's)")
    p.add_argument("--quick", action="store_true", help="smoke run for CI: 3 agents, 20 replayed endpoints")
    p.add_argument("--replay-serve", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.sizes, args.allocations, args.replayed, args.repeat = "3", 20, "20", 1
    if args.replay_serve:
        asyncio.run(
            replay_serve(Path(args.replay_serve[0]), int(args.replay_serve[1]), int(args.replay_serve[2]))
        )
        return 0
    try:
        replayed = [int(s) for s in args.replayed.split(",")]
    except ValueError:
        p.error(f"--replayed: sizes separated by commas, got {args.replayed!r}")
    if min(replayed) < 2 or max(replayed) > 999_999:
        p.error(f"--replayed: each size from 2 to 999999, got {args.replayed!r}")
    raise_fd_limit(max(replayed) + 1024)
    root = RealRoot(prefix="coloc-bench")
    try:
        with tempfile.TemporaryDirectory(prefix="coloc-rb-", dir="/tmp") as d:
            out = asyncio.run(measure(args, Path(d), root))
    finally:
        root.cleanup()
    for k, v in out.items():
        print(f"{k:48} {v}")
    return finish("bench/recovery.py", out)


if __name__ == "__main__":
    sys.exit(main())
