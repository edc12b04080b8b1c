"""A long run with churn: the agent's exported series and its memory, sampled over time, must stay flat.

    python bench/soak.py [--quick] [--minutes 30] [--live 150] [--period 1.0] [--warmup-min 5] [--sample-s 30]
                         [--ring-size 256] [--agent-env NAME=VALUE ...]

The agent runs as on a node (bench/footprint.py's layout: one `coloc-agent run` process in its own cgroup
`agent/` beside the node cgroup root `node/` it manages; 1 s tick, fast path on, standalone mode, evictions
dry run; the ledger's event ring --ring-size events, see RING), for --minutes, while:
  - workloads churn: every --period seconds a pod cgroup with one sleeping process is made (HP pods under the
    node root, BE pods under `besteffort/`, alternately) and, past --live pods, the oldest is removed;
    every workload is new (a new name), so anything keyed by workload that is never forgotten grows;
  - HP's CPU comes in bursts (a busy loop for 4 s every 20 s, in `node/pod-hp-burner`): suppression shrinks
    BE's budget, holds it under pressure, grows it again, so it decides every tick with changing numbers;
  - one client holds a Watch stream open (the node API; re-opened at the server's maximum connection age),
    and /metrics is scraped every 2 s.
Every --sample-s seconds: the number of series /metrics exports (sample lines), `coloc_holds_total`'s
series, the ledger's revision (so the events in the ring), and the agent's RSS (VmRSS, RssAnon). Judged
from the first sample after both the warm-up (--warmup-min) and the ring's filling: flat when the ring
filled, the series count does not grow (the highest count of the last third of those samples is not above
that of the first third: a series may come and go, e.g. `coloc_pending_actions{kind="Hold"}` while a hold is
in flight), and RSS's least-squares slope is at most RSS_SLOPE_MAX_MB_PER_MIN. Errors: scrapes that failed,
and error lines in the agent's log. --agent-env sets a variable in the agent's
environment (e.g. MALLOC_ARENA_MAX=2, to compare allocator settings); --heap-trace DIR runs the agent
under kit.heaptrace: tracemalloc on, a dump every minute (`python -m kit.heaptrace --compare DIR 5 15`
then shows what grew; its RSS is then about twice the agent's own). `--quick` (CI): 1 minute, 30 pods
alive, a new one every 0.5 s, 15 s warm-up, a 64-event ring, a sample every 5 s; too short to judge
flatness, it shows that the soak runs and measures. The machine load stays modest: the agent, one sleep
per live pod, 20 % of one core in bursts.
Needs root and writable cgroups. Samples go to bench/out/soak.jsonl (--quick: soak-quick.jsonl); the last
line is one JSON object.
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
from collections import deque
from pathlib import Path
from typing import Any

from kit.agentbench import memory_kib, metrics_text, start_watcher, wait_ticking
from kit.agentproc import agent_argv, agent_config, stop
from kit.bench import finish, progress, require_tools
from kit.ports import free_port
from kit.realcg import RealRoot

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
BURST_EVERY_S, BURST_S = 20.0, 4
SCRAPE_EVERY_S = 2.0
SCRAPES_FAILING_MAX_S = 60.0  # the agent's /metrics not answering this long ends the soak
RING_DEFAULT = 4096  # the agent's state.ring_size
# The ledger's event ring (and the node API's cache of its encodings) grows to state.ring_size events, ~0.7 KB
# each: bounded, but at this churn (~2.5 events/s) the agent's 4,096 take ~27 minutes to fill, the whole run.
# With 256 it is full within the warm-up, so what grows after it has no bound (docs/reliability.md).
RING = 256
RSS_SLOPE_MAX_MB_PER_MIN = 0.02
HEAP_TRACE_EVERY_S = 60.0  # flat: at most ~0.5 MB over 25 minutes after warm-up


def series(text: str) -> tuple[int, int, float, int]:
    """(series exported, coloc_holds_total's series, ticks, the ledger's revision) of one /metrics text."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    holds = sum(1 for ln in lines if ln.startswith("coloc_holds_total{"))

    def value(name: str) -> float:
        return next((float(ln.split()[-1]) for ln in lines if ln.startswith(name + " ")), 0.0)

    return len(lines), holds, value("coloc_ticks_total"), int(value("coloc_ledger_revision"))


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, value) points, per minute; 0 for fewer than two."""
    if len(points) < 2:
        return 0.0
    mt = sum(t for t, _ in points) / len(points)
    mv = sum(v for _, v in points) / len(points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in points) / den * 60


def log_errors(log: Path) -> int:
    """Error (and critical) lines of the agent's JSON log."""
    if not log.exists():
        return 0
    return sum(1 for ln in log.read_text(errors="replace").splitlines()
               if '"level":"error"' in ln or '"level":"critical"' in ln or "Traceback" in ln)


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
                       node={"name": "soak-node", "cpus": 2, "memory": "4Gi"}, log={"level": "warning"},
                       state={"ring_size": args.ring_size})
    log = d / "agent.log"
    env = {**os.environ, **dict(kv.split("=", 1) for kv in args.agent_env)}
    with log.open("ab") as f:
        argv = agent_argv("run", "--config", str(cfg)) if args.heap_trace is None else \
            [sys.executable, "-m", "kit.heaptrace", str(args.heap_trace.resolve()), str(HEAP_TRACE_EVERY_S),
             "run", "--config", str(cfg)]
        proc = root.spawn("agent", argv, stdout=f, stderr=f, cwd=REPO, env=env)
    watcher = burner = None
    samples: list[dict[str, Any]] = []
    scrapes = scrape_errors = 0
    OUT.mkdir(parents=True, exist_ok=True)
    out = (OUT / ("soak-quick.jsonl" if args.quick else "soak.jsonl")).open("w")  # CI's keeps a long run's
    churn = Churn(root, args.live)
    try:
        wait_ticking(port, proc, log)
        watcher = start_watcher(d / "agent.sock", log)
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_churn = next_scrape = next_sample = next_burst = last_answer = t0
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
                next_scrape = now + SCRAPE_EVERY_S
                try:
                    text = metrics_text(port)
                except OSError as err:
                    scrape_errors += 1
                    progress(f"scrape failed: {err}")
                    if now - last_answer > SCRAPES_FAILING_MAX_S:
                        raise RuntimeError(f"/metrics unanswered for {SCRAPES_FAILING_MAX_S:g} s") from err
                    continue
                scrapes += 1
                last_answer = now
                if now >= next_sample:
                    n, holds, ticks, revision = series(text)
                    mem = memory_kib(proc.pid)
                    s = {"t_s": round(now - t0, 1), "series": n, "holds_series": holds, "ticks": ticks,
                         "revision": revision, "ring_events": min(revision, args.ring_size),
                         "rss_mb": round(mem["VmRSS"] / 1024, 2),
                         "rss_anon_mb": round(mem["RssAnon"] / 1024, 2),
                         "hwm_mb": round(mem["VmHWM"] / 1024, 1), "threads": mem["Threads"],
                         "workloads_made": churn.made, "workloads_live": len(churn.pods), "scrapes": scrapes,
                         "scrape_errors": scrape_errors}
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
        status = stop(proc, 30)
    res = summarize(args, samples, churn.made)
    res.update(scrape_errors=scrape_errors, agent_log_errors=log_errors(log), agent_exit_status=status)
    return res


def summarize(args: argparse.Namespace, samples: list[dict[str, Any]], made: int) -> dict[str, Any]:
    ring = args.ring_size
    ring_full = next((s["t_s"] for s in samples if s["ring_events"] >= ring), None)
    # judged once both the warm-up is over and the event ring is full (it grows to its bound until then)
    judged_from = max(args.warmup_min * 60, ring_full if ring_full is not None else 0.0)
    warm = [s for s in samples if s["t_s"] >= judged_from]
    if len(warm) < 3:
        raise RuntimeError(f"{len(warm)} samples after warm-up and a full ring (from {judged_from:.0f} s): "
                           "flatness needs three (shorter --sample-s, longer --minutes, smaller --ring-size)")
    first, after, last = samples[0], warm[0], samples[-1]
    events_per_min = slope_per_min([(s["t_s"], s["revision"]) for s in samples])
    res: dict[str, Any] = {"minutes": args.minutes, "warmup_minutes": args.warmup_min, "workloads_made": made,
                           "workloads_live": args.live, "samples": len(samples), "ring_size": ring,
                           "ring_full_at_s": ring_full, "judged_from_s": round(after["t_s"], 1),
                           "events_per_min": round(events_per_min, 1)}
    for name, s in (("start", first), ("after_warmup", after), ("end", last)):
        res[f"series_{name}"] = s["series"]
        res[f"holds_series_{name}"] = s["holds_series"]
        res[f"rss_mb_{name}"] = s["rss_mb"]
        res[f"rss_anon_mb_{name}"] = s["rss_anon_mb"]
    third = max(1, len(warm) // 3)
    res["series_max_after_warmup"] = max(s["series"] for s in warm)
    res["series_min_after_warmup"] = min(s["series"] for s in warm)
    # a series that comes and goes (a Hold pending while a sample is taken) is not growth: compare the
    # highest count of the last third of the judged samples with that of the first third
    res["series_growth_after_warmup"] = (max(s["series"] for s in warm[-third:])
                                         - max(s["series"] for s in warm[:third]))
    res["rss_mb_max_after_warmup"] = max(s["rss_mb"] for s in warm)
    res["rss_growth_mb_after_warmup"] = round(last["rss_mb"] - after["rss_mb"], 2)
    for key in ("rss_mb", "rss_anon_mb"):
        slope = slope_per_min([(s["t_s"], s[key]) for s in warm])
        res[f"{key.removesuffix('_mb')}_slope_mb_per_min_after_warmup"] = round(slope, 4)
    res["rss_slope_max_mb_per_min"] = RSS_SLOPE_MAX_MB_PER_MIN
    res["flat"] = (ring_full is not None and res["series_growth_after_warmup"] <= 0
                   and res["rss_slope_mb_per_min_after_warmup"] <= RSS_SLOPE_MAX_MB_PER_MIN)
    return res


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI: 1 min, 30 pods alive, a new one every 0.5 s, 15 s warm-up, a sample every 5 s")
    p.add_argument("--minutes", type=float, default=30.0, help="how long the churn runs")
    p.add_argument("--live", type=int, default=150, help="pods alive at once")
    p.add_argument("--period", type=float, default=1.0, help="seconds between two new pods")
    p.add_argument("--warmup-min", type=float, default=5.0, help="minutes before flatness is judged")
    p.add_argument("--sample-s", type=float, default=30.0, help="seconds between two samples")
    p.add_argument("--ring-size", type=int, default=RING,
                   help=f"the agent's state.ring_size ({RING}; the agent's default: {RING_DEFAULT} events)")
    p.add_argument("--heap-trace", type=Path, default=None, metavar="DIR",
                   help="run the agent under kit.heaptrace (tracemalloc; a dump into DIR every minute)")
    p.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable of the agent's environment (repeatable)")
    args = p.parse_args()
    if args.quick:
        args.minutes, args.live, args.period, args.warmup_min, args.sample_s = 1.0, 30, 0.5, 0.25, 5.0
        args.ring_size = 64
    if args.warmup_min >= args.minutes:
        p.error("--warmup-min must be shorter than --minutes")
    if args.ring_size < 16:
        p.error(f"--ring-size must be at least 16, got {args.ring_size}")
    if args.live < 1 or args.period <= 0 or args.sample_s <= 0:
        p.error("--live must be at least 1, --period and --sample-s above 0")
    for kv in args.agent_env:
        if "=" not in kv or not kv.split("=", 1)[0]:
            p.error(f"--agent-env {kv!r}: expected NAME=VALUE")
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
    print(f"{out['workloads_made']} workloads made in {out['minutes']:g} min, {out['events_per_min']} ledger "
          f"events/min; the {out['ring_size']}-event ring full at {out['ring_full_at_s']} s; judged from "
          f"{out['judged_from_s']} s: series "
          f"{out['series_min_after_warmup']}..{out['series_max_after_warmup']} (growth "
          f"{out['series_growth_after_warmup']}), RSS max "
          f"{out['rss_mb_max_after_warmup']} MB, slope {out['rss_slope_mb_per_min_after_warmup']} MB/min "
          f"(anon {out['rss_anon_slope_mb_per_min_after_warmup']}; flat: ≤ {RSS_SLOPE_MAX_MB_PER_MIN}); "
          f"scrape errors {out['scrape_errors']}, agent log errors {out['agent_log_errors']}; "
          f"{'flat' if out['flat'] else 'NOT flat'}")
    return finish("bench/soak.py", out, ("series_end", "rss_mb_end", "rss_slope_mb_per_min_after_warmup"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
