"""A real agent process for the node-API acceptance tests and the recovery bench.

It wires the real parts: cgroup discovery and the real cgroup reader on a private root, the standalone
scanner that turns `besteffort/*` and `besteffort/hadoop-yarn/container_*` cgroups into BE workloads,
the persisted ledger, and the gRPC server on a unix socket. Each tick it lists the cgroups and syncs the
ledger; admissions arrive through the API. (It stands in for `coloc-agent run` until the agent process
serves the ledger itself; it has no policies, executors or metrics.)

    python agent_proc.py --node-id N --cgroup-root ROOT --socket PATH --state FILE [options]

Prints `READY <incarnation>` once serving. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from agent.api.server import ApiConfig, start_api_server
from agent.standalone import StandaloneConfig, StandaloneScanner
from agent.state import Ledger, LedgerConfig
from cgroups.discovery import discover
from cgroups.errors import CgroupError
from cgroups.reader import CgroupReader
from qos.model import NodeSnapshot, Resources, Usage, Workload


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--node-id", required=True)
    p.add_argument("--cgroup-root", required=True, help="relative to every hierarchy's mount")
    p.add_argument("--socket", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--batch-milli-cpu", type=int, default=1_000_000)
    p.add_argument("--batch-memory", type=int, default=1 << 40)
    p.add_argument("--ring-size", type=int, default=4096)
    p.add_argument("--watch-queue", type=int, default=1024)
    p.add_argument("--bookmark-s", type=float, default=1.0)
    p.add_argument("--launch-ttl", type=float, default=300.0)
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    hierarchy = discover()
    reader = CgroupReader(hierarchy, args.cgroup_root, psi=False)
    cpu_dir = hierarchy.controller_dir("cpu")

    def names(rel: str) -> list[str]:  # the scanner wants child names; the reader gives paths below the root
        return [c.rsplit("/", 1)[-1] for c in reader.children(rel)]

    scanner = StandaloneScanner(
        StandaloneConfig(),
        names,
        "besteffort",
        "burstable",
        "hadoop-yarn",
        lambda rel: str(cpu_dir / args.cgroup_root / rel),
    )
    ledger = Ledger.open(
        LedgerConfig(
            node_id=args.node_id,
            state_path=args.state,
            ring_size=args.ring_size,
            watch_queue_size=args.watch_queue,
            pending_launch_ttl_s=args.launch_ttl,
        )
    )
    ledger.start_persistence()
    server = await start_api_server(
        ledger, ApiConfig(socket_path=args.socket, bookmark_interval_s=args.bookmark_s)
    )
    batch = Resources(args.batch_milli_cpu, args.batch_memory)
    capacity = Resources(2 * args.batch_milli_cpu, 2 * args.batch_memory)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    def tick() -> None:
        workloads: list[Workload] = []
        stale: dict[str, str] = {}
        try:
            workloads = scanner.scan()
        except CgroupError as err:
            stale["cgroups"] = f"cannot list cgroups: {err}"
        now = time.time()
        snap = NodeSnapshot(
            taken_at=now,
            capacity=capacity,
            cpus=(0, 1),
            node_usage=Usage(),
            hp_usage=Usage(),
            be_usage=Usage(),
            system_usage=Usage(),
            workloads=tuple(workloads),
            stale=stale,
        )
        ledger.sync(snap, batch, now)

    tick()
    print(f"READY {ledger.identity.incarnation}", flush=True)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), args.interval)
        except TimeoutError:
            tick()
    await server.stop(0.5)
    await ledger.close()
    reader.close()


if __name__ == "__main__":
    asyncio.run(run(parse(sys.argv[1:])))
