"""A long run with churn: the agent's exported series and its memory, sampled over time, must stay flat.

    python bench/soak.py [--minutes 30] [--live 150] [--period 1.0] [--warmup-min 5] [--sample-s 30]

The agent runs as on a node (bench/footprint.py's layout: one `coloc-agent run` process in its own cgroup
`agent/` beside the node cgroup root `node/` it manages; 1 s tick, fast path on, standalone mode, evictions
dry run), for --minutes, while:
  - workloads churn: every --period seconds a pod cgroup with one sleeping process is made (HP pods under the
    node root, BE pods under `besteffort/`, alternately) and, past --live pods, the oldest is removed;
    every workload is new (a new name), so anything keyed by workload that is never forgotten grows;
  - HP's CPU comes in bursts (a busy loop for 4 s every 20 s, in `node/pod-hp-burner`): suppression shrinks
    BE's budget, holds it under pressure, grows it again, so it decides every tick with changing numbers;
  - one client holds a Watch stream open (the node API), and /metrics is scraped every 2 s.
Every --sample-s seconds: the number of series /metrics exports (sample lines), `coloc_holds_total`'s
series, and the agent's RSS (VmRSS, RssAnon). Flat after warm-up: the series count after --warmup-min does
not change, and RSS at the end is within 10 % (and 4 MB) of RSS right after warm-up. The machine load stays
modest: the agent, one sleep per live pod, 20 % of one core in bursts.
Needs root and writable cgroups. Samples go to bench/out/soak.jsonl; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

from kit.agentproc import agent_argv, agent_config, stop
from kit.bench import finish, progress, require_tools
from kit.ports import free_port
from kit.realcg import RealRoot

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
# A scheduler's Watch: the server ends a stream at its maximum connection age, and the client watches again.
WATCHER = ("import asyncio, sys\n"
           "from agent.api.client import AgentCallError, AgentClient\n"
           "async def main():\n"
           "    first = True\n"
           "    while True:\n"
           "        try:\n"
           "            async with AgentClient(sys.argv[1]) as c:\n"
           "                stream = c.watch(send_initial=True)\n"
           "                await anext(stream)\n"
           "                if first:\n"
           "                    print('watching', flush=True)\n"
           "                    first = False\n"
           "                async for _ in stream:\n"
           "                    pass\n"
           "        except AgentCallError as err:\n"
           "            if 'max connection age' not in str(err):\n"
           "                raise\n"
           "asyncio.run(main())\n")
BURST_EVERY_S, BURST_S = 20.0, 4
RSS_SLACK = (0.10, 4.0)  # flat: end within 10 % and 4 MB of after warm-up


def metrics_text(port: int) -> str:
    return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())


def series(text: str) -> tuple[int, int, float]:
    """(series exported, coloc_holds_total's series, ticks) of one /metrics text."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    holds = sum(1 for ln in lines if ln.startswith("coloc_holds_total{"))
    ticks = next((float(ln.split()[-1]) for ln in lines if ln.startswith("coloc_ticks_total ")), 0.0)
    return len(lines), holds, ticks


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            out[key] = int(value.split()[0])
    return out


def wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"agent exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
        try:
            if series(metrics_text(port))[2] >= 2:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"agent not ticking after {timeout}s:\n{log.read_text()[-2000:]}")


def start_watcher(sock: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as f:
        proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(sock)], stdout=subprocess.PIPE, stderr=f,
                                cwd=REPO)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"watching":
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"the watcher got no first batch:\n{log.read_text()[-2000:]}")
    return proc


class Churn:
    """Pod cgroups made and removed, each with one sleeping process; every one a new name."""

    def __init__(self, root: RealRoot, live: int) -> None:
        self.root, self.live, self.made = root, live, 0
        self.pods: deque[tuple[str, subprocess.Popen[bytes]]] = deque()

    def step(self) -> None:
        i = self.made
        rel = f"node/pod-hp-{i:05d}" if i % 2 == 0 else f"node/besteffort/pod-be-{i:05d}"
        self.root.mkcg(rel)
        self.pods.append((rel, self.root.spawn(rel, ["sleep", "86400"])))
        self.made += 1
        while len(self.pods) > self.live:
            self.remove(*self.pods.popleft())

    def remove(self, rel: str, proc: subprocess.Popen[bytes]) -> None:
        proc.kill()
        proc.wait(10)
        self.root.procs.remove(proc)
        for d in self.root.dirs(rel):
            for _ in range(50):  # the kernel may take a moment to empty the cgroup
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def soak(args: argparse.Namespace, root: RealRoot, d: Path) -> dict[str, Any]:
    root.mkcg("agent")
    root.mkcg("node/besteffort")
    root.mkcg("node/pod-hp-burner")
    port = free_port()
    cfg = agent_config(d, f"{root.name}/node", port, loop=None, eviction={"dry_run": True},
                       node={"name": "soak-node", "cpus": 2, "memory": "4Gi"}, log={"level": "warning"})
    log = d / "agent.log"
    with log.open("ab") as f:
        proc = root.spawn("agent", agent_argv("run", "--config", str(cfg)), stdout=f, stderr=f, cwd=REPO)
    watcher = burner = None
    samples: list[dict[str, Any]] = []
    OUT.mkdir(parents=True, exist_ok=True)
    out = (OUT / "soak.jsonl").open("w")
    try:
        wait_ready(port, proc, log)
        watcher = start_watcher(d / "agent.sock", log)
        churn = Churn(root, args.live)
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_churn = next_scrape = next_sample = next_burst = t0
        scrapes = 0
        progress(f"agent pid {proc.pid} ticking, a Watch open; churning for {args.minutes:g} min")
        while (now := time.monotonic()) < end:
            if proc.poll() is not None:
                raise RuntimeError(f"the agent ended during the soak:\n{log.read_text()[-2000:]}")
            if watcher.poll() is not None:
                raise RuntimeError(f"the watcher ended during the soak:\n{log.read_text()[-2000:]}")
            if now >= next_burst and (burner is None or burner.poll() is not None):
                burner = root.spawn("node/pod-hp-burner",
                                    ["timeout", str(BURST_S), "sh", "-c", "while :; do :; done"])
                next_burst = now + BURST_EVERY_S
            if now >= next_churn:
                churn.step()
                next_churn += args.period
            if now >= next_scrape:
                text = metrics_text(port)
                scrapes += 1
                next_scrape = now + 2.0
                if now >= next_sample:
                    n, holds, ticks = series(text)
                    mem = memory_kib(proc.pid)
                    s = {"t_s": round(now - t0, 1), "series": n, "holds_series": holds, "ticks": ticks,
                         "rss_mb": round(mem["VmRSS"] / 1024, 1),
                         "rss_anon_mb": round(mem["RssAnon"] / 1024, 1),
                         "hwm_mb": round(mem["VmHWM"] / 1024, 1), "workloads_made": churn.made,
                         "workloads_live": len(churn.pods), "scrapes": scrapes}
                    samples.append(s)
                    out.write(json.dumps(s) + "\n")
                    out.flush()
                    progress(json.dumps(s))
                    next_sample = now + args.sample_s
            time.sleep(max(0.0, min(next_churn, next_scrape) - time.monotonic()))
    finally:
        out.close()
        for p in (watcher, burner):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        stop(proc, 30)
    return summarize(args, samples, churn.made)


def summarize(args: argparse.Namespace, samples: list[dict[str, Any]], made: int) -> dict[str, Any]:
    warm = [s for s in samples if s["t_s"] >= args.warmup_min * 60]
    first, after, last = samples[0], warm[0], samples[-1]
    res: dict[str, Any] = {"minutes": args.minutes, "workloads_made": made, "live": args.live,
                           "samples": len(samples)}
    for name, s in (("start", first), ("after_warmup", after), ("end", last)):
        res[f"series_{name}"] = s["series"]
        res[f"holds_series_{name}"] = s["holds_series"]
        res[f"rss_mb_{name}"] = s["rss_mb"]
        res[f"rss_anon_mb_{name}"] = s["rss_anon_mb"]
    res["series_max_after_warmup"] = max(s["series"] for s in warm)
    res["series_min_after_warmup"] = min(s["series"] for s in warm)
    res["rss_mb_max_after_warmup"] = max(s["rss_mb"] for s in warm)
    res["rss_growth_mb_after_warmup"] = round(last["rss_mb"] - after["rss_mb"], 1)
    slack = max(after["rss_mb"] * RSS_SLACK[0], RSS_SLACK[1])
    res["flat"] = (res["series_max_after_warmup"] == res["series_min_after_warmup"]
                   and res["rss_mb_max_after_warmup"] - after["rss_mb"] <= slack)
    return res


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--live", type=int, default=150, help="pods alive at once")
    p.add_argument("--period", type=float, default=1.0, help="seconds between two new pods")
    p.add_argument("--warmup-min", type=float, default=5.0)
    p.add_argument("--sample-s", type=float, default=30.0)
    args = p.parse_args()
    if args.warmup_min >= args.minutes:
        p.error("--warmup-min must be shorter than --minutes")
    return args


def main() -> int:
    args = parse()
    require_tools("bench/soak.py", ("sleep", "timeout", "sh"))
    root = RealRoot(prefix="coloc-bench-soak")
    d = Path(tempfile.mkdtemp(prefix="coloc-soak-", dir="/tmp"))  # short: unix socket paths ≤ 107 bytes
    try:
        out = soak(args, root, d)
    finally:
        root.cleanup()
        shutil.rmtree(d, ignore_errors=True)
    for name in ("start", "after_warmup", "end"):
        print(f"{name:13} series {out[f'series_{name}']:5}  (holds {out[f'holds_series_{name}']:3})  "
              f"RSS {out[f'rss_mb_{name}']:6.1f} MB (anon {out[f'rss_anon_mb_{name}']})")
    print(f"{out['workloads_made']} workloads made in {out['minutes']:g} min; after warm-up: series "
          f"{out['series_min_after_warmup']}..{out['series_max_after_warmup']}, RSS max "
          f"{out['rss_mb_max_after_warmup']} MB; {'flat' if out['flat'] else 'NOT flat'}")
    return finish("bench/soak.py", out, ("series_end", "rss_mb_end"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
