"""`coloc-agent demo`: the agent at work on this very machine, on a private cgroup hierarchy.

It builds `coloc-demo-<pid>` under every cgroup controller, starts a real HP service (CPU-bound, reporting
its throughput), real BE work (CPU burners, YARN-style containers, later a memory hog that grows), then:

1. HP alone; 2. HP beside BE, no agent; 3. HP beside BE with the agent (HP load comes and goes, so the BE
budget shrinks and grows back); 4. the memory hog pushes the private node's working set over the threshold
and the agent evicts exactly enough, lowest priority first. A wake-up probe in the HP cgroup (every 2 ms,
how late each wake-up was) gives HP's wake-up p99 per second and per phase: the tail, beside throughput.
It prints a live view and a summary, and removes everything it made, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.config.standalone import LocalWorkload, StandaloneConfig
from agent.daemon.runtime import BE_TIER, Runtime, build, remove_tree
from agent.demo.spawn import spawn_in_cgroup, workload_argv
from agent.demo.workloads import read_counter
from agent.published import ActionRecord

YARN_APP = "1700000000000_0001"
HP = "hp-service"


@dataclass
class Demo:
    rt: Runtime
    tmp: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    counters: list[Path] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    p99_ms: dict[str, float | None] = field(default_factory=dict)  # phase -> HP wake-up p99

    @property
    def probe_file(self) -> Path:
        return self.tmp / "probe.bin"

    def probe_offset(self) -> int:
        size = self.probe_file.stat().st_size if self.probe_file.exists() else 0
        return size - size % 4

    def probe_p99_ms(self, start: int, end: int) -> float | None:
        """p99 of how late the probe's wake-ups were (ms) between two offsets of its file."""
        if end <= start:
            return None
        with self.probe_file.open("rb") as f:
            f.seek(start)
            data = f.read(end - start)
        late = sorted(struct.unpack(f"<{len(data) // 4}i", data[: len(data) // 4 * 4]))
        return round(late[min(len(late) - 1, int(0.99 * len(late)))] / 1e3, 3) if late else None

    def start(self, name: str, rel: str, argv: list[str]) -> None:
        self.procs[name] = spawn_in_cgroup(self.rt.hierarchy, self.rt.cfg.cgroups.root, rel, argv,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def start_hp(self, name: str, threads: int) -> None:
        counter = self.tmp / f"{name}.count"
        self.counters.append(counter)
        self.start(name, HP, workload_argv("hp", threads, counter))

    def hp_count(self) -> int:
        return sum(read_counter(str(c)) for c in self.counters)


def demo_config(root: str, memory: str, interval: float) -> AgentConfig:
    be = [LocalWorkload(f"{BE_TIER}/batch-hog", priority=3000, memory="512Mi"),
          LocalWorkload(f"{BE_TIER}/batch-low", priority=3500, milli_cpu=1000),
          LocalWorkload(f"{BE_TIER}/batch-mid", priority=5000, milli_cpu=1000)]
    return AgentConfig(
        node=NodeConfig(name="demo-node", memory=memory, scope="cgroup-root"),
        cgroups=CgroupConfig(root=root, setup_tiers=True, cleanup_on_exit=True),
        loop=LoopConfig(interval_s=interval),
        eviction=EvictionConfig(grace_period_s=1.0, rate_per_minute=30, burst=3),
        standalone=StandaloneConfig(workloads=tuple(be)),
        state=StateConfig(path=""),
    )


def _fmt_cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus)) if cpus else "-"


async def measure(demo: Demo, seconds: float, phase: str, live: bool) -> float:
    """HP work units per second over `seconds`, printing one live line per second; the phase's HP wake-up
    p99 goes to `demo.p99_ms`."""
    start_count, start = demo.hp_count(), time.monotonic()
    last_count, last = start_count, start
    phase_off = last_off = demo.probe_offset()
    while time.monotonic() - start < seconds:
        await asyncio.sleep(1.0)
        now, count = time.monotonic(), demo.hp_count()
        rate = (count - last_count) / (now - last)
        last_count, last = count, now
        off = demo.probe_offset()
        p99 = demo.probe_p99_ms(last_off, off)
        last_off = off
        pub = demo.rt.board.get()
        snap = pub.snapshot if pub else None
        be_cpu = snap.be_usage.milli_cpu if snap and snap.be_usage.milli_cpu is not None else 0.0
        mem = snap.node_usage.memory_working_set_bytes if snap else None
        cap = demo.rt.capacity.memory_bytes
        budget = pub.be_cpu_granted_milli if pub and pub.be_cpu_granted_milli is not None else -1
        row = {"t": round(now - demo.t0, 1), "phase": phase, "hp_units_per_s": round(rate),
               "be_budget_milli_cpu": budget,
               "be_cpus": _fmt_cpus(snap.be_tier.cpuset) if snap else "-",
               "be_milli_cpu": round(be_cpu), "mem_pct": round(100 * mem / cap, 1) if mem else 0.0,
               "evictions": sum(pub.counters.evictions.values()) if pub else 0,
               "hp_p99_ms": p99 if p99 is not None else -1.0}
        demo.samples.append({k: v for k, v in row.items() if isinstance(v, int | float)})
        if live:
            grant = f"{budget:>5}m" if budget >= 0 else "    -"
            print(f"{row['t']:6.1f}s  {phase:<22} HP {row['hp_units_per_s']:>7}/s  BE budget {grant}"
                  f" cpus {row['be_cpus']:<4} used {row['be_milli_cpu']:>5}m  mem {row['mem_pct']:>5}%"
                  f"  evictions {row['evictions']}  HP wake-up p99 {p99 if p99 is not None else '-'} ms",
                  flush=True)
    demo.p99_ms[phase] = demo.probe_p99_ms(phase_off, demo.probe_offset())
    return (demo.hp_count() - start_count) / (time.monotonic() - start)


def write_plot(demo: Demo, path: Path) -> str:
    """HP throughput and the BE budget / BE usage over the demo's phases, as a PNG next to the summary."""
    try:
        from agent.demo.plots import plot_timeseries
    except ImportError:
        return "no plot: matplotlib is not installed (pip install 'coloc-agent[plots]')"
    hp = [(s["t"], s["hp_units_per_s"]) for s in demo.samples]
    be = [(s["t"], s["be_milli_cpu"]) for s in demo.samples]
    budget = [(s["t"], s["be_budget_milli_cpu"]) for s in demo.samples if s["be_budget_milli_cpu"] >= 0]
    tail = [(s["t"], s["hp_p99_ms"]) for s in demo.samples if s["hp_p99_ms"] >= 0]
    phases = ", ".join(f"{k}: {v} ms" for k, v in demo.p99_ms.items() if k in _TAIL_PHASES and v is not None)
    try:
        plot_timeseries(path, "coloc-agent demo: HP throughput (work units/s)", {"HP": hp}, "units/s")
        cpu_path = path.with_name(path.stem + "-be-cpu" + path.suffix)
        plot_timeseries(cpu_path, "coloc-agent demo: BE CPU (milli-cores)",
                        {"BE used": be, "BE budget (agent)": budget}, "milli-CPU")
        tail_path = path.with_name(path.stem + "-hp-p99" + path.suffix)
        plot_timeseries(tail_path, f"coloc-agent demo: HP wake-up p99 per second (phases: {phases})",
                        {"HP wake-up p99": tail}, "ms")
    except Exception as err:  # a plot is a nicety; never fail the demo for it
        return f"no plot: {err}"
    return f"{path}, {cpu_path}, {tail_path}"


async def run_demo(scale: float, memory: str, live: bool, out: Path | None,
                   plot: Path | None = None) -> dict[str, object]:
    root = f"coloc-demo-{os.getpid()}"
    rt = build(demo_config(root, memory, 0.5))
    tmp = Path(tempfile.mkdtemp(prefix="coloc-demo-"))
    demo = Demo(rt, tmp)
    stop = asyncio.Event()
    agent_task: asyncio.Task[None] | None = None
    try:
        rt.writer.mkdir(HP)
        for rel in ("batch-low", "batch-mid", "batch-hog", f"hadoop-yarn/container_e01_{YARN_APP}_01_000001",
                    f"hadoop-yarn/container_e01_{YARN_APP}_01_000002"):
            rt.writer.mkdir(f"{BE_TIER}/{rel}")
            rt.writer.set_cpuset(f"{BE_TIER}/{rel}", rt.cpus)
        demo.start_hp("hp-base", 1)
        demo.start_hp("hp-burst", 1)
        demo.start("hp-probe", HP, workload_argv("probe", 2, demo.probe_file))
        print(f"coloc-agent demo: private node {root}: {len(rt.cpus)} CPUs, {memory} memory")
        alone = await measure(demo, 6 * scale, "1 HP alone", live)
        for name, rel in (("be-low", "batch-low"), ("be-mid", "batch-mid"),
                          ("yarn-am", f"hadoop-yarn/container_e01_{YARN_APP}_01_000001"),
                          ("yarn-c2", f"hadoop-yarn/container_e01_{YARN_APP}_01_000002")):
            demo.start(name, f"{BE_TIER}/{rel}", workload_argv("burn"))
        demo.start("be-low-2", f"{BE_TIER}/batch-low", workload_argv("burn"))
        contended = await measure(demo, 6 * scale, "2 BE, no agent", live)
        agent_task = asyncio.create_task(rt.loop.run(stop))
        with_agent = await measure(demo, 6 * scale, "3 BE + agent", live)
        demo.stop("hp-burst")
        await measure(demo, 4 * scale, "3 HP light, BE grows", live)
        before = rt.board.get()
        budget_before = before.be_cpu_granted_milli if before else None
        demo.start_hp("hp-burst-2", 1)
        cut_s = await time_to_cut(demo, budget_before, 3.0)
        await measure(demo, 3 * scale, "3 HP heavy again", live)
        demo.stop("hp-burst-2")
        demo.start("be-hog", f"{BE_TIER}/batch-hog", workload_argv("hog", 64, 0.1, 2048))
        hog_started = time.monotonic()
        while time.monotonic() - hog_started < 20 * scale:
            await measure(demo, 1, "4 memory hog", live)
            pub = rt.board.get()
            if pub is not None and sum(pub.counters.evictions.values()) > 0:
                break
        await measure(demo, 2, "4 after eviction", live)
        last = rt.board.get()
        records = list(last.recent_actions) if last else []
        summary = summarize(alone, contended, with_agent, records, cut_s, demo)
        if plot is not None:
            summary["plot"] = write_plot(demo, plot)
        print(json.dumps(summary, indent=2))
        if out is not None:
            out.write_text(json.dumps(summary, indent=2))
        return summary
    finally:
        stop.set()
        if agent_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(agent_task, 5)
        for name in list(demo.procs):
            demo.stop(name)
        with contextlib.suppress(Exception):
            await rt.executor.drain(5)
        remove_tree(rt.writer, rt.reader, "")
        rt.reader.close()
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        print(f"removed {root} and everything under it")


async def time_to_cut(demo: Demo, budget_before: int | None, limit_s: float) -> float | None:
    """Seconds from now until the agent grants BE less than `budget_before` (None if it never does)."""
    if budget_before is None:
        return None
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        pub = demo.rt.board.get()
        if pub and pub.be_cpu_granted_milli is not None and pub.be_cpu_granted_milli < budget_before:
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    return None


def summarize(alone: float, contended: float, with_agent: float, records: list[ActionRecord],
              cut_s: float | None, demo: Demo) -> dict[str, object]:
    evicted = [r.target for r in records if r.kind == "evict" and r.outcome in ("started", "done")]
    alone_p99, no_agent_p99, agent_p99 = (demo.p99_ms.get(k) for k in _TAIL_PHASES)
    return {
        "hp_wakeup_p99_ms_alone": alone_p99,
        "hp_wakeup_p99_ms_no_agent": no_agent_p99,
        "hp_wakeup_p99_ms_with_agent": agent_p99,
        "p99_with_agent_vs_no_agent": _ratio(agent_p99, no_agent_p99),
        "p99_with_agent_vs_alone": _ratio(agent_p99, alone_p99),
        "hp_alone_units_per_s": round(alone),
        "hp_contended_no_agent_units_per_s": round(contended),
        "hp_contended_with_agent_units_per_s": round(with_agent),
        "ratio_no_agent": round(contended / alone, 3) if alone else None,
        "ratio_with_agent": round(with_agent / alone, 3) if alone else None,
        "be_cut_after_hp_load_s": round(cut_s, 3) if cut_s is not None else
        "none: BE was already at its floor (on a 2-CPU node the cpuset policy keeps BE on 1 CPU)",
        "evicted": sorted(set(evicted)),
    }


_TAIL_PHASES = ("1 HP alone", "2 BE, no agent", "3 BE + agent")


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="coloc-agent demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="stretch or shrink every phase (default 1)")
    p.add_argument("--memory", default="1Gi", help="memory of the private node (default 1Gi)")
    p.add_argument("--quiet", action="store_true", help="no live view, summary only")
    p.add_argument("--json-out", type=Path, help="also write the summary here")
    p.add_argument("--plot", type=Path, default=Path("coloc-demo.png"),
                   help="write PNG plots here (default coloc-demo.png; '' for none)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("coloc-agent demo: needs root (it creates cgroups and moves processes into them)",
              file=sys.stderr)
        return 2

    async def guarded() -> None:
        plot = args.plot if str(args.plot) not in ("", ".") else None
        task = asyncio.ensure_future(run_demo(args.scale, args.memory, not args.quiet, args.json_out, plot))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(guarded())
    return 0

