"""What the agent costs the node it protects: its CPU, wake-ups and memory, at 0 and 200 workloads.

    python bench/footprint.py [--quick] [--workloads 200] [--seconds 30]

The agent runs as it runs on a node: one `coloc-agent run` process (default config: 1 s tick, fast path on;
standalone mode: no Kubernetes, but the node API serves its unix socket as on a node) in its own cgroup
`agent/` under a unique bench root, managing the node cgroup root `node/` beside it. Phases, each measured for
--seconds after a settling pause:
  - `0`:   no workload cgroups, no API client;
  - `N`:   --workloads workload cgroups, each with two sleeping processes: half HP pods directly under
           the node root, half BE pods under `besteffort/` (as the kubelet lays them out); no API client;
  - `N_watch`: the same, with one client (its own process) holding a Watch stream open, as a scheduler's
           node-side client does;
  - `N_eager_kube`: the same, with the agent started with the `kubernetes` client imported up front
           (what every agent paid before it was imported lazily), for RSS side by side.
Measured from /proc for the agent's process (all its threads): CPU as % of one core (schedstat run time),
wake-ups/s (voluntary context switches: each is a sleep ended by a wake-up), RSS and VmHWM; from its
/metrics: ticks, mean tick duration, fast-path mode. Targets (issue 24): CPU ≤ 1 % of a core and RSS ≤ 64 MB
at N; wake-ups/s are reported, not judged (issue 17's budget of 5 is retired: at 34 wake-ups/s the agent's
effect on HP's tail was inside run-to-run noise, docs/performance.md). Preemptions (involuntary switches) are
reported apart, `preempted_per_s`: they measure the machine's other load (20-60/s while a 12 ms tick meets
other load on a shared 2-CPU machine, ~0 on a quiet one), not the agent waking up.
Wake-ups are also split by thread: gRPC core's (`event_engine`, `grpc_global_timer`, `lifeguard`: the node API
is grpc.aio, whose core threads wake on their own timers, more while a client holds a connection) and the
agent's own (`python`: the loop, 2/s calm). The targets are judged at `N` and at `N_watch` (a scheduler's
Watch is the normal state of a node). The settling pause
(≥ 6 s after start) covers the agent's one-off release of start-up heap (5 s after start,
agent/cli/run.py), so RSS is the steady state, not start-up's peak.
Needs root and writable cgroups. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kit.agentbench import memory_kib, metrics_text, start_watcher, wait_ticking
from kit.agentproc import agent_argv, agent_config, stop
from kit.bench import finish, progress, require_tools
from kit.ports import free_port
from kit.realcg import RealRoot
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent

TARGET_CPU_PERCENT = 1.0
TARGET_RSS_MB = 64.0
GRPC_THREADS = ("event_engine", "grpc_global_tim", "lifeguard")  # comm names are cut at 15 characters
EAGER_KUBE = ("import sys, runpy, kubernetes.client, kubernetes.config; sys.argv[0] = 'coloc-agent'; "
              "runpy.run_module('agent.cli', run_name='__main__')")


def proc_counters(pid: int) -> tuple[int, int, int, dict[str, int]]:
    """(run time ns, voluntary switches, preemptions) summed over every thread of `pid`, and voluntary
    switches by thread name. A voluntary switch is a sleep, so one wake-up; a preemption (nonvoluntary) is
    the scheduler taking the CPU from a running thread, which other load on the machine decides."""
    run_ns = woken = preempted = 0
    by_name: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            run_ns += int((task / "schedstat").read_text().split()[0])
            name = (task / "comm").read_text().strip()
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    woken += int(line.split()[1])
                    by_name[name] = by_name.get(name, 0) + int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    preempted += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between listing and reading
    return run_ns, woken, preempted, by_name


def scrape(port: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics_text(port)):
        for s in fam.samples:
            if s.name == "coloc_fast_path_mode" and s.value == 1:
                out[f"mode={s.labels['mode']}"] = 1
            elif s.name in ("coloc_ticks_total", "coloc_tick_duration_seconds_sum",
                            "coloc_tick_duration_seconds_count"):
                out[s.name] = s.value
    return out


def mode_of(m: dict[str, float]) -> str:
    return next((k.split("=", 1)[1] for k in m if k.startswith("mode=")), "?")


def measure(pid: int, port: int, seconds: float) -> dict[str, Any]:
    m0 = scrape(port)
    run0, sw0, pre0, names0, t0 = *proc_counters(pid), time.monotonic()
    time.sleep(seconds)
    run1, sw1, pre1, names1, t1 = *proc_counters(pid), time.monotonic()
    m1 = scrape(port)
    dt = t1 - t0
    ticks = m1.get("coloc_ticks_total", 0) - m0.get("coloc_ticks_total", 0)
    n = m1.get("coloc_tick_duration_seconds_count", 0) - m0.get("coloc_tick_duration_seconds_count", 0)
    tsum = m1.get("coloc_tick_duration_seconds_sum", 0) - m0.get("coloc_tick_duration_seconds_sum", 0)
    mem = memory_kib(pid)
    return {"cpu_percent": round((run1 - run0) / 1e9 / dt * 100, 3),
            "wakeups_per_s": round((sw1 - sw0) / dt, 2),
            "preempted_per_s": round((pre1 - pre0) / dt, 2),
            "rss_mb": round(mem["VmRSS"] / 1024, 1), "hwm_mb": round(mem["VmHWM"] / 1024, 1),
            # anonymous (the agent's own) vs file-backed (shared libraries: grpc, OpenSSL, ...) pages
            "rss_anon_mb": round(mem["RssAnon"] / 1024, 1), "rss_file_mb": round(mem["RssFile"] / 1024, 1),
            "threads": mem["Threads"], "ticks_per_s": round(ticks / dt, 2),
            "tick_ms_mean": round(tsum / n * 1e3, 2) if n else None, "fast_path_mode": mode_of(m1),
            "seconds": round(dt, 1),
            "wakeups_per_s_by_thread": {k: round((v - names0.get(k, 0)) / dt, 2)
                                        for k, v in sorted(names1.items()) if v > names0.get(k, 0)}}


def add_workloads(root: RealRoot, n: int) -> None:
    for i in range(n):
        rel = f"node/pod-hp-{i:03d}" if i % 2 == 0 else f"node/besteffort/pod-be-{i:03d}"
        root.mkcg(rel)
        for _ in range(2):
            root.spawn(rel, ["sleep", "3600"])


def start_agent(root: RealRoot, cfg: Path, log: Path, eager_kube: bool) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", EAGER_KUBE, "run", "--config", str(cfg)] if eager_kube \
        else agent_argv("run", "--config", str(cfg))
    with log.open("ab") as f:
        return root.spawn("agent", argv, stdout=f, stderr=f, cwd=REPO)


def phase(root: RealRoot, d: Path, name: str, seconds: float, settle: float, eager: bool = False,
          watch: bool = False) -> dict[str, Any]:
    port = free_port()
    cfg = agent_config(d, f"{root.name}/node", port, loop=None, eviction={"dry_run": True},
                       node={"name": "footprint-node", "cpus": 2, "memory": "4Gi"}, log={"level": "warning"})
    log = d / "agent.log"
    proc = start_agent(root, cfg, log, eager)
    watcher = None
    try:
        wait_ticking(port, proc, log)
        if watch:
            watcher = start_watcher(d / "agent.sock", log)
        progress(f"phase {name}: agent pid {proc.pid} ticking{' with a Watch open' if watch else ''}; "
                 f"settling {settle:.0f} s, then {seconds:.0f} s")
        time.sleep(settle)
        out = measure(proc.pid, port, seconds)
        if watcher is not None and watcher.poll() is not None:
            raise RuntimeError(f"the watcher ended during the phase:\n{log.read_text()[-2000:]}")
    finally:
        if watcher is not None:
            watcher.kill()
            watcher.wait(10)
        stop(proc, 30)
    out["grpc_core_wakeups_per_s"] = round(sum(v for k, v in out["wakeups_per_s_by_thread"].items()
                                               if k.startswith(GRPC_THREADS)), 2)
    progress(f"phase {name}: {out}")
    return out


def run(args: argparse.Namespace, root: RealRoot, d: Path) -> dict[str, Any]:
    root.mkcg("agent")
    root.mkcg("node")
    res: dict[str, Any] = {"workloads": args.workloads}
    res["0"] = phase(root, d, "0", args.seconds, args.settle)
    progress(f"creating {args.workloads} workload cgroups with 2 processes each")
    add_workloads(root, args.workloads)
    n = str(args.workloads)
    res[n] = phase(root, d, n, args.seconds, args.settle)
    res[f"{n}_watch"] = phase(root, d, f"{n}_watch", args.seconds, args.settle, watch=True)
    res[f"{n}_eager_kube"] = phase(root, d, f"{n}_eager_kube", max(2.0, args.seconds / 3), args.settle,
                                   eager=True)
    at = res[n]
    res["rss_saved_by_lazy_kube_mb"] = round(res[f"{n}_eager_kube"]["rss_mb"] - at["rss_mb"], 1)
    for key in ("cpu_percent", "wakeups_per_s", "rss_mb", "rss_anon_mb"):
        res[key] = at[key]
    res["loop_thread_wakeups_per_s"] = at["wakeups_per_s_by_thread"].get("python", 0.0)
    res["grpc_core_wakeups_per_s"] = at["grpc_core_wakeups_per_s"]
    for key in ("wakeups_per_s", "cpu_percent", "rss_mb"):
        res[f"{key}_with_watch"] = res[f"{n}_watch"][key]
    res["targets"] = {"cpu_percent": TARGET_CPU_PERCENT, "rss_mb": TARGET_RSS_MB}
    res["budget_met"] = {}
    for suffix, r in (("", at), ("_with_watch", res[f"{n}_watch"])):
        res["budget_met"].update({f"cpu{suffix}": r["cpu_percent"] <= TARGET_CPU_PERCENT,
                                  f"rss{suffix}": r["rss_mb"] <= TARGET_RSS_MB})
    return res


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", type=int, default=200)
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per phase")
    p.add_argument("--settle", type=float, default=6.0, help="seconds after the agent is ticking")
    p.add_argument("--quick", action="store_true", help="CI: 40 workloads, 4 s phases")
    args = p.parse_args()
    if args.quick:
        args.workloads, args.seconds, args.settle = 40, 4.0, 6.0
    return args


def main() -> int:
    args = parse()
    require_tools("bench/footprint.py", ("sleep",))  # the workloads' processes
    root = RealRoot(prefix="coloc-bench-footprint")
    d = Path(tempfile.mkdtemp(prefix="coloc-fp-", dir="/tmp"))  # short: unix socket paths ≤ 107 bytes
    try:
        out = run(args, root, d)
    finally:
        root.cleanup()
        shutil.rmtree(d, ignore_errors=True)
    n = str(args.workloads)
    for k in ("0", n, f"{n}_watch", f"{n}_eager_kube"):
        r = out[k]
        print(f"{k + ' workloads':24} CPU {r['cpu_percent']:6.2f} % of a core  "
              f"{r['wakeups_per_s']:6.1f} wake-ups/s  RSS {r['rss_mb']:5.1f} MB (anon {r['rss_anon_mb']}, "
              f"HWM {r['hwm_mb']})  tick {r['tick_ms_mean']} ms  {r['fast_path_mode']}")
        print(f"{'':24} wake-ups/s by thread: {r['wakeups_per_s_by_thread']}; "
              f"preempted {r['preempted_per_s']}/s")
    print(f"wake-ups/s at {n}: gRPC core {out['grpc_core_wakeups_per_s']}, "
          f"agent's own threads {round(out['wakeups_per_s'] - out['grpc_core_wakeups_per_s'], 2)}; "
          f"with a Watch open {out['wakeups_per_s_with_watch']} "
          f"(gRPC core {out[f'{n}_watch']['grpc_core_wakeups_per_s']})")
    met = out["budget_met"]
    for suffix, label in (("", ""), ("_with_watch", " with a Watch open")):
        print(f"budget at {n} workloads{label}: "
              f"CPU ≤ {TARGET_CPU_PERCENT} % {'met' if met['cpu' + suffix] else 'NOT met'}, "
              f"RSS ≤ {TARGET_RSS_MB} MB {'met' if met['rss' + suffix] else 'NOT met'}")
    return finish("bench/footprint.py", out,
                  ("cpu_percent", "wakeups_per_s", "rss_mb", "rss_saved_by_lazy_kube_mb"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
