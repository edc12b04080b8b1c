"""The real agent under API and scrape load: 1,000 gRPC clients and 50 `/metrics` scrapers for 60 s.

    python bench/load.py [--quick] [--clients 1000] [--scrapers 50] [--seconds 60] [--interval 0.5]

One real `coloc-agent run` process (private cgroup root, state and socket in a temporary directory, loop
interval --interval, fast path off so every tick is an interval tick) holding --allocations allocations
admitted through the API. Then, for --seconds:
  - --clients gRPC clients, each its own connection to the agent's unix socket,
    from --workers client processes: half call GetSnapshot every --snapshot-period s (± 50 % jitter),
    half hold a Watch stream opened as a scheduler opens it (GetSnapshot, then Watch from its revision);
  - a scheduler admitting --admit-rate new allocations a second through the same socket, so watchers
    receive events; as a scheduler does, it admits only what the batch budget still holds (the node is
    sized so the fill and every Admit fit: a refusal or a skipped Admit is then a real failure);
  - --scrapers threads scraping /metrics every --scrape-period s.
Measured: tick intervals (start to start, from the agent's own `coloc_last_tick_timestamp_seconds`,
sampled every 50 ms with `coloc_ticks_total`; pairs where a tick was not seen are left out and counted),
tick cadence (ticks ÷ window/interval), mean tick duration (`coloc_tick_duration_seconds` sum/count),
GetSnapshot / Admit / scrape latency, Watch events, every error, and the agent's RSS high-water mark
(VmHWM). Every error is kept with its gRPC status code and details and printed as a histogram
("error_kinds"). Before the load: GetSnapshot p50/p99 on the quiet agent with the allocations in the
ledger.
Needs root and writable cgroups; raises the open-file limit to the hard limit. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import psutil
from kit.agentproc import agent_argv, agent_config, proc_kib, stop
from kit.api import changes_socket
from kit.bench import finish, pct, progress
from kit.ports import free_port, raise_fd_limit
from kit.realcg import RealRoot
from prometheus_client.parser import text_string_to_metric_families

from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.state import AdmitRequest
from qos.model import Resources, Source

REPO = Path(__file__).resolve().parent.parent

CHANNEL = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 64 << 20)]
TARGET_TICK_P99_RATIO = 1.10
TARGET_SNAPSHOT_P99_MS = 5.0


# ---- gRPC client workers (separate processes) --------------------------------------------------------------


def _snapshot_call(ch: grpc.aio.Channel) -> Any:
    return ch.unary_unary("/coloc.v1.NodeAgent/GetSnapshot",
                          request_serializer=pb.GetSnapshotRequest.SerializeToString,
                          response_deserializer=pb.Snapshot.FromString)


async def _snapshotter(address: str, start: float, end: float, period: float, out: dict[str, Any]) -> None:
    async with grpc.aio.insecure_channel(address, options=CHANNEL) as ch:
        call = _snapshot_call(ch)
        await call(pb.GetSnapshotRequest(), timeout=30)  # connected before the window opens
        await asyncio.sleep(max(0.0, start - time.time()) + random.uniform(0, period))
        while time.time() < end:
            t = time.perf_counter()
            try:
                await call(pb.GetSnapshotRequest(), timeout=10)
                if time.time() < end:
                    out["snapshot_ms"].append((time.perf_counter() - t) * 1e3)
            except grpc.aio.AioRpcError as err:
                out["errors"].append(rpc_error("GetSnapshot", err))
            await asyncio.sleep(period * random.uniform(0.5, 1.5))


async def _watcher(address: str, end: float, out: dict[str, Any]) -> None:
    async with grpc.aio.insecure_channel(address, options=CHANNEL) as ch:
        snap = await _snapshot_call(ch)(pb.GetSnapshotRequest(), timeout=30)
        watch = ch.unary_stream("/coloc.v1.NodeAgent/Watch",
                                request_serializer=pb.WatchRequest.SerializeToString,
                                response_deserializer=pb.WatchResponse.FromString)
        stream = watch(pb.WatchRequest(incarnation=snap.identity.incarnation, from_revision=snap.revision))
        out["watch_open"] += 1
        try:
            async with asyncio.timeout(max(0.1, end - time.time())):
                async for resp in stream:
                    out["watch_events"] += sum(1 for e in resp.events if e.type != pb.EVENT_TYPE_BOOKMARK)
            out["errors"].append("Watch ended early")
        except TimeoutError:
            stream.cancel()
        except grpc.aio.AioRpcError as err:
            out["errors"].append(rpc_error("Watch", err))


async def worker_main(address: str, snapshotters: int, watchers: int, start: float, end: float,
                      period: float) -> dict[str, Any]:
    out: dict[str, Any] = {"snapshot_ms": [], "errors": [], "watch_open": 0, "watch_events": 0}
    tasks = [_snapshotter(address, start, end, period, out) for _ in range(snapshotters)]
    tasks += [_watcher(address, end, out) for _ in range(watchers)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, grpc.aio.AioRpcError):
            out["errors"].append(rpc_error("connect (first GetSnapshot)", r))
        elif isinstance(r, BaseException):
            out["errors"].append(f"{type(r).__name__}: {r}"[:160])
    return out


def rpc_error(method: str, err: grpc.aio.AioRpcError) -> str:
    """One error as the histogram counts it: method, status code, details (cut)."""
    return f"{method} {err.code().name}: {err.details() or ''}"[:400]


# ---- scrapers and the tick sampler (threads of the bench process) -----------------------------------------


def _metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = {"coloc_ticks_total", "coloc_tick_errors_total", "coloc_last_tick_timestamp_seconds",
              "coloc_tick_duration_seconds_sum", "coloc_tick_duration_seconds_count"}
    return {s.name: float(s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name in wanted and not s.labels}


class Sampler(threading.Thread):
    """Reads the agent's latest tick start and tick count every 50 ms: tick-to-tick intervals."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.stop = port, stop
        self.intervals: list[float] = []
        self.unseen = 0  # consecutive samples more than one tick apart: interval not known
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def run(self) -> None:
        prev: tuple[float, float] | None = None
        while not self.stop.is_set():
            try:
                m = _metrics(self.port)
            except OSError:
                time.sleep(0.05)
                continue
            self.first = self.first or m
            self.last = m
            cur = (m["coloc_ticks_total"], m["coloc_last_tick_timestamp_seconds"])
            if prev is not None and cur[0] > prev[0]:
                if cur[0] - prev[0] == 1:
                    self.intervals.append(cur[1] - prev[1])
                else:
                    self.unseen += 1
            prev = cur
            time.sleep(0.05)


def scrape(port: int, end: float, period: float, lat: list[float], errors: list[str]) -> None:
    time.sleep(random.uniform(0, period))
    while time.time() < end:
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                resp.read()
            lat.append((time.perf_counter() - t) * 1e3)
        except OSError as err:
            errors.append(f"scrape {type(err).__name__}: {err}"[:120])
        time.sleep(period * random.uniform(0.5, 1.5))


# ---- the agent ---------------------------------------------------------------------------------------


def budget_cpus(args: argparse.Namespace) -> int:
    """Node CPUs whose whole batch budget (reclaim threshold 100 %) holds the fill and every Admit of the
    load (1 milli-CPU each) with room to spare: a refusal is then a real failure, not a full node."""
    needed: int = args.allocations + math.ceil(args.admit_rate * args.seconds) + 200
    return max(2, math.ceil(needed / 1000))


def agent_sections(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The agent's config for this load, over kit.agentproc's standalone agent."""
    watchers = args.clients - args.clients // 2
    return {
        "node": {"name": "load-node", "cpus": budget_cpus(args), "memory": "64Gi"},
        "batch": {"origin": "local", "cpu_reclaim_threshold_percent": 100},
        "loop": {"interval_s": args.interval},
        "eviction": {"dry_run": True},
        "state": {"pending_launch_ttl_s": 3600},
        # Room for every watcher and every call in flight; the defaults (128 streams) are for a node.
        "api": {"max_streams": max(128, watchers + 16),
                "max_concurrent_rpcs": max(1024, 2 * args.clients + 64)},
        "log": {"level": "warning"},
    }


def request(i: int) -> AdmitRequest:
    return AdmitRequest(f"local/batch/load-{i:06d}", f"app-load-{i // 100:04d}", Source.LOCAL,
                        Resources(1, 1 << 20), request_id=f"r{i}")


async def fill(sock: str, n: int) -> None:
    async with AgentClient(sock) as c:
        for _ in range(100):  # the batch budget is known after the agent's first ticks
            if (await c.snapshot_message()).node.batch_allocatable.milli_cpu >= n:
                break
            await asyncio.sleep(0.1)
        for lo in range(0, n, 50):
            results = await asyncio.gather(*(c.admit(request(i), 1) for i in range(lo, min(lo + 50, n))))
            refused = [r for r in results if not r.accepted]
            assert not refused, refused[0]


async def wait_serving(sock: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(300):
        assert proc.poll() is None, f"agent exited:\n{log.read_text()[-2000:]}"
        if Path(sock).exists():
            try:
                async with AgentClient(sock) as c:
                    await c.status(timeout=1)
                return
            except Exception:  # not serving yet
                pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"agent not serving:\n{log.read_text()[-2000:]}")


async def quiet_snapshot(sock: str, calls: int) -> dict[str, float]:
    """GetSnapshot latency on the quiet agent, one connection, calls one after another."""
    ms: list[float] = []
    async with grpc.aio.insecure_channel(f"unix:{sock}", options=CHANNEL) as ch:
        call = _snapshot_call(ch)
        for _ in range(100):
            await call(pb.GetSnapshotRequest(), timeout=10)
        for _ in range(calls):
            t = time.perf_counter()
            m = await call(pb.GetSnapshotRequest(), timeout=10)
            ms.append((time.perf_counter() - t) * 1e3)
    return {"snapshot_quiet_p50_ms": round(pct(ms, 50), 3), "snapshot_quiet_p99_ms": round(pct(ms, 99), 3),
            "snapshot_allocations": len(m.allocations), "snapshot_bytes": m.ByteSize()}


async def admitter(sock: str, first: int, rate: float, end: float, lat: list[float],
                   errors: list[str]) -> int:
    i = first
    async with AgentClient(sock) as c:
        status = await c.status()  # as a scheduler does: admit only what fits
        room = status.node.batch_allocatable.milli_cpu - status.batch_allocated.milli_cpu
        while time.time() < end:
            t = time.perf_counter()
            if room < 1:
                errors.append("Admit not sent: the batch budget is full (the bench's sizing is wrong)")
                await asyncio.sleep(1 / rate)
                continue
            try:
                r = await c.admit(request(i), 1)
                lat.append((time.perf_counter() - t) * 1e3)
                room = r.batch_free.milli_cpu
                if not r.accepted:
                    errors.append(f"Admit refused: {r.refusal} {r.message}"[:160])
            except Exception as err:  # counted; the load goes on
                errors.append(f"Admit {type(err).__name__}: {err}"[:120])
            i += 1
            await asyncio.sleep(1 / rate)
    return i - first


# ---- the run --------------------------------------------------------------------------------------------


def start_workers(args: argparse.Namespace, sock: str, start: float,
                  end: float) -> list[subprocess.Popen[str]]:
    snap_total, watch_total = args.clients // 2, args.clients - args.clients // 2
    procs = []
    for w in range(args.workers):
        s = snap_total // args.workers + (w < snap_total % args.workers)
        k = watch_total // args.workers + (w < watch_total % args.workers)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", f"unix:{sock}", str(s), str(k), repr(start), repr(end),
             repr(args.snapshot_period)], stdout=subprocess.PIPE, text=True, cwd=REPO))
    return procs


class RssWatch(threading.Thread):
    def __init__(self, pid: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.proc, self.stop, self.max_rss = psutil.Process(pid), stop, 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.max_rss = max(self.max_rss, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.1)


async def load_phase(args: argparse.Namespace, sock: str, port: int, agent_pid: int) -> dict[str, Any]:
    start = time.time() + args.ramp
    end = start + args.seconds
    workers = start_workers(args, sock, start, end)
    stop = threading.Event()
    sampler, rss = Sampler(port, stop), RssWatch(agent_pid, stop)
    scrape_ms: list[float] = []
    errors: list[str] = []
    scrapers = [threading.Thread(target=scrape, args=(port, end, args.scrape_period, scrape_ms, errors),
                                 daemon=True) for _ in range(args.scrapers)]
    rss.start()
    await asyncio.sleep(max(0.0, start - time.time()))
    progress(f"load: {args.clients} gRPC clients, {args.scrapers} scrapers, {args.seconds} s")
    sampler.start()
    for t in scrapers:
        t.start()
    admit_ms: list[float] = []
    admitted = await admitter(changes_socket(sock), args.allocations, args.admit_rate, end, admit_ms, errors)
    for t in scrapers:
        t.join(15)
    stop.set()
    sampler.join(5)
    results = []
    for p in workers:
        out, _ = await asyncio.to_thread(p.communicate, timeout=120)
        assert p.returncode == 0 and out.strip(), f"worker failed ({p.returncode})"
        results.append(json.loads(out.strip().splitlines()[-1]))
    snapshot_ms = [x for r in results for x in r["snapshot_ms"]]
    errors += [e for r in results for e in r["errors"]]
    return summarize(args, sampler, snapshot_ms, admit_ms, scrape_ms, errors, results, admitted,
                     rss.max_rss, proc_kib(agent_pid, "VmHWM"))


def summarize(args: argparse.Namespace, sampler: Sampler, snapshot_ms: list[float], admit_ms: list[float],
              scrape_ms: list[float], errors: list[str], results: list[dict[str, Any]], admitted: int,
              rss_max: int, hwm_kib: int) -> dict[str, Any]:
    first, last = sampler.first, sampler.last
    ticks = last["coloc_ticks_total"] - first["coloc_ticks_total"]
    window = last["coloc_last_tick_timestamp_seconds"] - first["coloc_last_tick_timestamp_seconds"]
    dur_n = last["coloc_tick_duration_seconds_count"] - first["coloc_tick_duration_seconds_count"]
    dur_s = last["coloc_tick_duration_seconds_sum"] - first["coloc_tick_duration_seconds_sum"]
    iv = sampler.intervals
    kinds = collections.Counter(errors).most_common()
    return {
        "clients": args.clients, "scrapers": args.scrapers, "seconds": args.seconds,
        "configured_interval_s": args.interval,
        "tick_interval_p50_s": round(pct(iv, 50), 4), "tick_interval_p99_s": round(pct(iv, 99), 4),
        "tick_interval_max_s": round(max(iv, default=float("nan")), 4),
        "tick_interval_p99_ratio": round(pct(iv, 99) / args.interval, 3),
        "tick_intervals_measured": len(iv), "tick_intervals_unseen": sampler.unseen,
        "tick_cadence_ratio": round(ticks / (window / args.interval), 3) if window > 0 else float("nan"),
        "tick_duration_mean_ms": round(dur_s / dur_n * 1e3, 3) if dur_n else float("nan"),
        "tick_errors": int(last["coloc_tick_errors_total"] - first["coloc_tick_errors_total"]),
        "rpc_snapshot_calls": len(snapshot_ms),
        "rpc_snapshot_calls_per_s": round(len(snapshot_ms) / args.seconds, 1),
        "rpc_snapshot_p50_ms": round(pct(snapshot_ms, 50), 3),
        "rpc_snapshot_p99_ms": round(pct(snapshot_ms, 99), 3),
        "rpc_admit_calls": admitted, "rpc_admit_p99_ms": round(pct(admit_ms, 99), 3),
        "watch_streams_open": sum(r["watch_open"] for r in results),
        "watch_events_received": sum(r["watch_events"] for r in results),
        "scrapes": len(scrape_ms), "scrape_p99_ms": round(pct(scrape_ms, 99), 3),
        "errors": len(errors), "error_kinds": dict(kinds[:10]),
        "agent_rss_max_mib": round(rss_max / (1 << 20), 1), "agent_vm_hwm_mib": round(hwm_kib / 1024, 1),
    }


async def measure(args: argparse.Namespace, d: Path, root: RealRoot) -> dict[str, Any]:
    port = free_port()
    sock = str(d / "agent.sock")
    cfg = agent_config(d, f"{root.name}/agent", port, **agent_sections(args))
    log = d / "agent.log"
    with log.open("w") as f:
        agent = subprocess.Popen(agent_argv("run", "--config", str(cfg)), stdout=f, stderr=f, cwd=REPO)
    try:
        await wait_serving(sock, agent, log)
        await fill(changes_socket(sock), args.allocations)
        progress(f"{args.allocations} allocations admitted")
        out: dict[str, Any] = {"allocations": args.allocations, "fd_limit": raise_fd_limit()}
        out.update(await quiet_snapshot(sock, args.snapshot_calls))
        progress(f"quiet GetSnapshot: p50 {out['snapshot_quiet_p50_ms']} ms, "
                 f"p99 {out['snapshot_quiet_p99_ms']} ms")
        out.update(await load_phase(args, sock, port, agent.pid))
        assert agent.poll() is None, f"agent died under load:\n{log.read_text()[-2000:]}"
    finally:
        stop(agent, 30)
    out["agent_exit_code"] = agent.returncode
    out["target_tick_interval_p99_ratio"] = TARGET_TICK_P99_RATIO
    out["target_snapshot_p99_ms"] = TARGET_SNAPSHOT_P99_MS
    return out


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=1000, help="gRPC clients: half GetSnapshot, half Watch")
    p.add_argument("--scrapers", type=int, default=50)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--interval", type=float, default=0.5, help="the agent's loop.interval_s")
    p.add_argument("--allocations", type=int, default=1000)
    p.add_argument("--snapshot-period", type=float, default=2.0, help="seconds between one client's calls")
    p.add_argument("--scrape-period", type=float, default=1.0)
    p.add_argument("--admit-rate", type=float, default=5.0, help="Admits per second during the load")
    p.add_argument("--snapshot-calls", type=int, default=1000, help="quiet GetSnapshot calls")
    p.add_argument("--workers", type=int, default=2, help="client processes")
    p.add_argument("--ramp", type=float, default=20.0, help="seconds to connect every client first")
    p.add_argument("--quick", action="store_true", help="CI: 100 clients, 10 scrapers, 8 s, 200 allocations")
    p.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.clients, args.scrapers, args.seconds, args.allocations = 100, 10, 8, 200
        args.snapshot_calls, args.ramp, args.workers = 200, 6, 1
    return args


def main() -> int:
    args = parse()
    if args.worker:
        address, s, w, start, end, period = args.worker
        print(json.dumps(asyncio.run(worker_main(address, int(s), int(w), float(start), float(end),
                                                 float(period)))))
        return 0
    raise_fd_limit()
    root = RealRoot(prefix="coloc-bench-load")
    d = Path(tempfile.mkdtemp(prefix="coloc-load-", dir="/tmp"))  # short: unix socket paths ≤ 107 bytes
    try:
        out = asyncio.run(measure(args, d, root))
    finally:
        root.cleanup()
        shutil.rmtree(d, ignore_errors=True)
    for k, v in out.items():
        if k != "error_kinds":
            print(f"{k:40} {v}")
    for kind, count in out["error_kinds"].items():
        print(f"error {count:6} × {kind}")
    ok = out["tick_interval_p99_ratio"] <= TARGET_TICK_P99_RATIO
    print(f"target tick interval p99 ≤ {TARGET_TICK_P99_RATIO} × configured: {'met' if ok else 'NOT met'}; "
          f"quiet GetSnapshot p99 {out['snapshot_quiet_p99_ms']} ms vs target {TARGET_SNAPSHOT_P99_MS} ms: "
          f"{'met' if out['snapshot_quiet_p99_ms'] <= TARGET_SNAPSHOT_P99_MS else 'NOT met'}")
    return finish("bench/load.py", out, ("tick_interval_p99_ratio", "rpc_snapshot_p99_ms", "agent_vm_hwm_mib",
                                         "errors", "snapshot_quiet_p99_ms"))


if __name__ == "__main__":
    sys.exit(main())
