"""The metrics server under a flood: the loop's cadence and tick cost while /metrics is abused.

    python bench/metrics_flood.py [--quick] [--connections 3000] [--scrapers 50] [--seconds 10]

One real `coloc-agent run` process on a private cgroup root (loop interval 0.2 s, fast path off), its
/metrics on a free local port. Two phases:
  - idle connections: --connections TCP connections that send the start of a request and then nothing
    (slowloris), opened from 30 threads, each connect waiting up to 1 s; then for --seconds, /healthz every
    0.5 s. Measured: how long the server took to take them all, the tick cadence over the window
    (ticks ÷ window/interval), the share of /healthz answered 200 within 2 s, the agent's threads and RSS
    high-water mark.
  - scrapers: the mean tick duration (`coloc_tick_duration_seconds` sum/count) over 4 s quiet, then over
    4 s with --scrapers threads scraping /metrics back to back; the ratio, and the scrapes answered.
Targets (bench/README.md): cadence >= 0.95, every /healthz answered, the 3,000 connections taken in < 30 s,
the tick mean under 50 scrapers <= 2 x quiet + 1 ms. Needs root and writable cgroups.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kit.agentproc import agent_config, get, metric, proc_status, running_agent, scraping
from kit.bench import finish, progress
from kit.poll import wait
from kit.ports import free_port, open_idle, raise_fd_limit
from kit.realcg import RealRoot

INTERVAL_S = 0.2
REQUIRED = ("idle_connections_open_s", "idle_connections_tick_cadence", "idle_connections_healthz_ok_share",
            "tick_mean_ms_quiet", "tick_mean_ms_scrapers", "tick_mean_ratio_scrapers")


def idle_connections(port: int, pid: int, n: int, seconds: float) -> dict[str, Any]:
    ticks0, t0 = metric(port, "coloc_ticks_total"), time.monotonic()
    socks = open_idle(port, n)
    opened = time.monotonic() - t0
    healthz: list[int] = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                healthz.append(get(f"http://127.0.0.1:{port}/healthz", timeout=2)[0])
            except OSError:
                healthz.append(0)
            time.sleep(0.5)
        ticks1, t1 = metric(port, "coloc_ticks_total", timeout=5), time.monotonic()
        threads, hwm = proc_status(pid, "Threads"), proc_status(pid, "VmHWM")
    finally:
        for s in socks:
            s.close()
    return {
        "idle_connections": n,
        "idle_connections_open_s": round(opened, 2),
        "idle_connections_tick_cadence": round((ticks1 - ticks0) / ((t1 - t0) / INTERVAL_S), 3),
        "idle_connections_healthz_ok_share": round(sum(c == 200 for c in healthz) / len(healthz), 3),
        "idle_connections_agent_threads": int(threads),
        "idle_connections_agent_vm_hwm": hwm,
    }


def tick_mean(port: int, window_s: float) -> float:
    """Mean tick duration over `window_s`, from the agent's own histogram."""
    name = "coloc_tick_duration_seconds"
    s0, c0 = metric(port, name + "_sum"), metric(port, name + "_count")
    time.sleep(window_s)
    s1, c1 = metric(port, name + "_sum"), metric(port, name + "_count")
    return (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")


def scrapers(port: int, n: int, window_s: float) -> dict[str, Any]:
    quiet = tick_mean(port, window_s)
    with scraping(port, n) as answered:
        time.sleep(1)  # every scraper connected
        loaded = tick_mean(port, window_s)
    return {"scrapers": n, "tick_mean_ms_quiet": round(quiet * 1e3, 3),
            "tick_mean_ms_scrapers": round(loaded * 1e3, 3),
            "tick_mean_ratio_scrapers": round(loaded / quiet, 3) if quiet > 0 else float("nan"),
            "scrapes_answered": sum(answered)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1,000 connections, 3 s windows")
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--scrapers", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0, help="the idle-connection window")
    args = p.parse_args(argv)
    window = 4.0
    if args.quick:
        args.connections, args.seconds, window = 1000, 3.0, 3.0
    raise_fd_limit(args.connections + 1000)
    root = RealRoot(prefix="coloc-bench-flood")
    try:
        with tempfile.TemporaryDirectory(prefix="coloc-flood-") as d:
            tmp, port = Path(d), free_port()
            cfg = agent_config(tmp, f"{root.name}/agent", port)
            with running_agent(cfg, tmp / "agent.log") as proc:
                if not wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30):
                    print((tmp / "agent.log").read_text()[-3000:], file=sys.stderr)
                    return 1
                progress(f"{args.connections} idle connections, {args.seconds:g} s")
                out = idle_connections(port, proc.pid, args.connections, args.seconds)
                progress(f"{args.scrapers} scrapers, {window:g} s windows")
                time.sleep(2)  # the idle connections' teardown out of the quiet window
                out |= scrapers(port, args.scrapers, window)
                out["agent_alive"] = proc.poll() is None
    finally:
        root.cleanup()
    for k, v in out.items():
        print(f"{k:40} {v}", file=sys.stderr)
    return finish("bench/metrics_flood.py", out, REQUIRED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
