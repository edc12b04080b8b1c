"""`coloc-agent demo`: the agent at work on this very machine, on a private cgroup hierarchy.

It builds `coloc-demo-<pid>` under every cgroup controller, starts a real HP service (CPU-bound, reporting
its throughput), real BE work (CPU burners, YARN-style containers, later a memory hog that grows), then:

1. HP alone; 2. HP beside BE, no agent; 3. HP beside BE with the agent, then HP's load steps down to
idle and up again, twice, so the BE budget grows and is cut back; 4. with HP light, the memory hog pushes
the private node's working set over the threshold and the agent evicts exactly enough, lowest priority
first. A wake-up probe in the HP cgroup (every 2 ms,
how late each wake-up was) gives HP's wake-up p99 per second and per phase: the tail, beside throughput.
The demo's own process, the agent included, sits where the DaemonSet puts the agent: a burstable pod of
the node (`burstable/pod-coloc-agent`, `cpu.shares` 51 for its 50m request), not in the machine's root
cgroup. A live line every second (`--quiet`: a short one every 3 s) comes from a printer thread of its own
(`LiveView`), on its own timer, reading the latest state: whatever blocks the demo's work (a BE process
that must get CPU before it can exec, a plot, a slow cleanup) never silences it. It carries the elapsed
time, the phase, HP throughput and CPU, HP's wake-up p99 over the last second, and the BE budget.
Then a summary and plots, and it removes everything it made, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.config.io import IoConfig
from agent.config.standalone import LocalWorkload, StandaloneConfig
from agent.config.trace import TraceConfig
from agent.daemon.cgroup_tree import BE_TIER, remove_tree
from agent.daemon.runtime import Runtime, build
from agent.demo import live as liveview
from agent.demo import story
from agent.demo.spawn import move_back, move_self, spawn_in_cgroup, workload_argv
from agent.demo.workloads import read_counter
from agent.published import ActionRecord
from agent.trace.files import trace_files

YARN_APP = "1700000000000_0001"
HP = "hp-service"
AGENT_POD = "burstable/pod-coloc-agent"
AGENT_SHARES = 51  # the DaemonSet's 50m CPU request, as the kubelet converts it
PROBE, STATE, SAMPLES = "probe.bin", "live-state.json", "live-samples.jsonl"  # in the demo's directory


@dataclass
class Demo:
    rt: Runtime
    tmp: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    counters: list[Path] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)  # the live view's rows (`load_samples`)
    t0: float = field(default_factory=time.monotonic)
    p99_ms: dict[str, float | None] = field(default_factory=dict)  # phase -> HP wake-up p99
    live: bool = True
    phase: str = "starting"  # what the live lines say the demo is doing (`set_phase`)
    marks: list[tuple[float, str]] = field(default_factory=list)  # (seconds since t0, phase) per change
    other_cpus: dict[str, float | None] = field(default_factory=dict)  # phase -> CPUs other work used
    throughput: dict[str, float] = field(default_factory=dict)  # phase -> HP work units/s

    def say(self, msg: str) -> None:
        """A progress line, prefixed with the seconds since the demo started."""
        liveview.out(f"{time.monotonic() - self.t0:6.1f}s  {msg}")

    @property
    def probe_file(self) -> Path:
        return self.tmp / PROBE

    @property
    def state_file(self) -> Path:
        return self.tmp / STATE

    @property
    def samples_file(self) -> Path:
        return self.tmp / SAMPLES

    def probe_offset(self) -> int:
        return liveview.probe_offset(str(self.probe_file))

    def probe_p99_ms(self, start: int, end: int) -> float | None:
        """p99 of how late the probe's wake-ups were (ms) between two offsets of its file."""
        return liveview.probe_p99_ms(str(self.probe_file), start, end)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.marks.append((time.monotonic() - self.t0, phase))
        self.publish()

    def machine_sample(self) -> tuple[float, float] | None:
        """(the machine's busy CPU-seconds, the demo's own) now: everything the demo runs (HP, BE, the
        agent, this process) is under its private root; None when either cannot be read."""
        try:
            busy, _ = story.cpu_busy_s(Path("/proc/stat").read_text())
            _, ns = self.rt.reader.cpu_usage("")
        except Exception:  # the warning then says the load could not be measured
            return None
        return busy, ns / 1e9

    def publish(self) -> None:
        """What the live view cannot measure itself: the phase, HP's counter files, the agent's last view."""
        pub = self.rt.board.get()
        snap = pub.snapshot if pub else None
        mem = snap.node_usage.memory_working_set_bytes if snap else None
        cap = self.rt.capacity.memory_bytes
        liveview.State(
            phase=self.phase, counters=[str(c) for c in self.counters],
            budget_milli=pub.be_cpu_granted_milli if pub and pub.be_cpu_granted_milli is not None else -1,
            be_cpus=_fmt_cpus(snap.be_tier.cpuset) if snap else "-",
            mem_pct=round(100 * mem / cap, 1) if mem and cap else 0.0,
            evictions=sum(pub.counters.evictions.values()) if pub else 0, at=time.monotonic(),
        ).write(self.state_file)

    async def keep_publishing(self, stop: asyncio.Event, every_s: float = 0.25) -> None:
        while not stop.is_set():
            self.publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)

    def load_samples(self) -> None:
        """The live view's rows so far (for the summary and the plots)."""
        try:
            lines = self.samples_file.read_text().splitlines()
        except OSError:
            lines = []
        self.samples = [json.loads(ln) for ln in lines if ln.endswith("}")]

    def start(self, name: str, rel: str, argv: list[str]) -> None:
        """Start `argv` in `rel`; returns once the child has exec'd. A child that enters a starved cgroup (BE
        on a busy machine) may wait long for the CPU to get that far: on the event loop, use `start_bg`."""
        self.procs[name] = spawn_in_cgroup(self.rt.hierarchy, self.rt.cfg.cgroups.root, rel, argv,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def start_bg(self, name: str, rel: str, argv: list[str]) -> None:
        """`start` in a worker thread: the event loop (the agent's too) goes on while the child gets there."""
        await asyncio.to_thread(self.start, name, rel, argv)

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def stop_all(self) -> None:
        """Kill every process first, then reap them: a killed BE process may need a while to get the CPU
        to exit, and the others need not wait for it."""
        procs, self.procs = list(self.procs.values()), {}
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()

    async def start_hp(self, name: str, threads: int) -> None:
        counter = self.tmp / f"{name}.count"
        self.counters.append(counter)
        self.publish()
        await self.start_bg(name, HP, workload_argv("hp", threads, counter))

    def signal_hp(self, sig: int, names: tuple[str, ...] = ("hp-base", "hp-burst")) -> None:
        for name in names:
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(sig)

    def hp_count(self) -> int:
        return sum(read_counter(str(c)) for c in self.counters)


def demo_config(root: str, memory: str, interval: float, trace: Path | None = None) -> AgentConfig:
    """The demo's agent; `trace`: the directory it records its trace in (None: no trace)."""
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
        io=IoConfig(paths=("/var/lib",)),  # the disk guard on the machine's disk (the demo's HP does no IO)
        trace=TraceConfig(enabled=True, dir=str(trace.resolve())) if trace is not None else TraceConfig(),
    )


def fresh_trace_dir(trace: Path | None) -> None:
    """The demo's trace directory, without the trace files of an earlier demo (a replay of the directory
    would take them for this run's start)."""
    if trace is None:
        return
    trace.mkdir(parents=True, exist_ok=True)
    for old in trace_files(trace):
        old.unlink()


def close_trace(rt: Runtime, trace: Path | None) -> None:
    """Write the rest of the trace, and say where it is and how to replay it."""
    if rt.trace is None or rt.trace.recorder is None or trace is None:
        return
    ticks = rt.trace.recorder.ticks
    rt.trace.close()
    liveview.out(f"the agent's trace: {trace}/ ({ticks} ticks); what it would have done with "
                 f"other settings: coloc-agent replay {trace} "
                 f"--set policies.suppression.threshold_percent=75")


def _fmt_cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus)) if cpus else "-"


class LiveView:
    """The live view (`agent.demo.live`): a process of its own, started from the cgroup the demo was started
    in, so neither the demo's thread (blocked in a fork, a spawn, a plot) nor its process's CPU share (the
    agent pod's 51 shares, next to nothing on a loaded machine) holds it up. It needs no more than the
    demo's directory and cgroup root: the demo starts it first, before anything slow."""

    def __init__(self, tmp: Path, cgroups: CgroupConfig, t0: float, live: bool = True,
                 every_s: float = 1.0) -> None:
        self.spec = liveview.Spec(cgroup_mount=cgroups.mount, cgroup_root=cgroups.root.strip("/"), hp=HP,
                                  be=BE_TIER, probe=str(tmp / PROBE), state=str(tmp / STATE),
                                  samples=str(tmp / SAMPLES), t0=t0, live=live, every_s=every_s)
        self.spec_file = tmp / "live-spec.json"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def of(cls, demo: Demo, every_s: float = 1.0) -> LiveView:
        """The live view of a demo already built (its state published first)."""
        demo.publish()
        return cls(demo.tmp, demo.rt.cfg.cgroups, demo.t0, demo.live, every_s)

    def start(self) -> None:
        self.spec.write(self.spec_file)
        self.proc = subprocess.Popen([sys.executable, "-m", "agent.demo.live", str(self.spec_file)],
                                     stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        """Stop printing; safe to call if never started."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def measure(demo: Demo, seconds: float, phase: str) -> float:
    """HP work units per second over `seconds` of `phase` (the live view's lines carry its name meanwhile);
    the phase's HP wake-up p99 goes to `demo.p99_ms`."""
    demo.set_phase(phase)
    start_count, start = demo.hp_count(), time.monotonic()
    phase_off = demo.probe_offset()
    load_before = demo.machine_sample()
    await asyncio.sleep(seconds)
    load_after = demo.machine_sample()
    elapsed = max(time.monotonic() - start, 1e-6)
    demo.p99_ms[phase] = demo.probe_p99_ms(phase_off, demo.probe_offset())
    demo.other_cpus[phase] = (story.other_cpus(load_after[0] - load_before[0], load_after[1] - load_before[1],
                                               elapsed) if load_before and load_after else None)
    demo.throughput[phase] = (demo.hp_count() - start_count) / elapsed
    return demo.throughput[phase]


def write_plot(demo: Demo, path: Path) -> str:
    """HP throughput, HP load beside the BE budget and BE usage, and HP's wake-up p99, as PNGs."""
    try:
        from agent.demo.plots import plot_timeseries
    except ImportError:
        return "no plot: matplotlib is not installed (pip install 'coloc-agent[plots]')"
    hp = [(s["t"], s["hp_units_per_s"]) for s in demo.samples]
    series = {"HP CPU used": [(s["t"], s["hp_milli_cpu"]) for s in demo.samples],
              "BE budget (agent)": [(s["t"], s["be_budget_milli_cpu"]) for s in demo.samples
                                    if s["be_budget_milli_cpu"] >= 0],
              "BE CPU used": [(s["t"], s["be_milli_cpu"]) for s in demo.samples]}
    tail = [(s["t"], s["hp_p99_ms"]) for s in demo.samples if s["hp_p99_ms"] >= 0]
    end = max((s["t"] for s in demo.samples), default=0.0)
    spans = [(p.start, p.end, p.label) for p in story.phase_spans(demo.marks, end)]
    # on the tail plot, each compared phase's name carries its p99 over the whole phase
    named = {story.PLOT_LABELS[k]: f"{story.PLOT_LABELS[k]}: {v:.2f} ms" for k, v in demo.p99_ms.items()
             if k in story.COMPARED and v is not None}
    tail_spans = [(a, b, named.get(label, label)) for a, b, label in spans]
    tail_shades = {named.get(k, k): v for k, v in story.SHADES.items()}
    try:
        plot_timeseries(path, "coloc-agent demo: HP throughput (work units/s)", {"HP": hp}, "units/s",
                        phases=spans, shades=story.SHADES)
        cpu_path = path.with_name(path.stem + "-be-cpu" + path.suffix)
        plot_timeseries(cpu_path, "coloc-agent demo: HP's CPU, the agent's BE budget, BE's CPU (milli-CPU)",
                        series, "milli-CPU", phases=spans, shades=story.SHADES)
        tail_path = path.with_name(path.stem + "-hp-p99" + path.suffix)
        plot_timeseries(tail_path, "coloc-agent demo: HP wake-up p99 per second (ms, log scale; the compared "
                        "phases' own p99 in their names)", {"HP wake-up p99": [p for p in tail if p[1] > 0]},
                        "ms", phases=tail_spans, shades=tail_shades, logy=True)
    except Exception as err:  # a plot is a nicety; never fail the demo for it
        return f"no plot: {err}"
    return f"{path}, {cpu_path}, {tail_path}"


async def run_demo(scale: float, memory: str, live: bool, out: Path | None,
                   plot: Path | None = None, trace: Path | None = None) -> dict[str, object]:
    t0, root = time.monotonic(), f"coloc-demo-{os.getpid()}"
    fresh_trace_dir(trace)
    cfg = demo_config(root, memory, 0.5, trace)
    tmp = Path(tempfile.mkdtemp(prefix="coloc-demo-"))
    view = LiveView(tmp, cfg.cgroups, t0, live)
    view.start()  # a line a second from here until everything is removed, from outside the agent's pod
    try:
        rt = build(cfg)
    except BaseException:
        view.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    demo = Demo(rt, tmp, t0=t0, live=live)
    stop = asyncio.Event()
    agent_task: asyncio.Task[None] | None = None
    back: list[tuple[str, str]] = []
    publishing = asyncio.Event()
    publisher: asyncio.Task[None] | None = None
    try:
        rt.writer.mkdir(HP)
        rt.writer.mkdir(AGENT_POD)
        rt.writer.set_cpuset(AGENT_POD, rt.cpus)
        rt.writer.set_cpu_shares(AGENT_POD, AGENT_SHARES)
        for rel in ("batch-low", "batch-mid", "batch-hog", f"hadoop-yarn/container_e01_{YARN_APP}_01_000001",
                    f"hadoop-yarn/container_e01_{YARN_APP}_01_000002"):
            rt.writer.mkdir(f"{BE_TIER}/{rel}")
            rt.writer.set_cpuset(f"{BE_TIER}/{rel}", rt.cpus)
        liveview.out(f"coloc-agent demo: private node {root}: {len(rt.cpus)} CPUs, {memory} memory; this "
                     f"process (and the agent, later) in {AGENT_POD}, cpu.shares {AGENT_SHARES}")
        demo.phase = "0 starting"
        publisher = asyncio.create_task(demo.keep_publishing(publishing))
        back = move_self(rt.hierarchy, root, AGENT_POD)  # where the DaemonSet puts the agent
        loadavg = _loadavg()
        demo.say("measuring the machine's other load for 1 s (nothing of the demo runs yet)")
        await measure(demo, 1.0, story.PREFLIGHT)
        demo.set_phase("0 starting HP")
        demo.say("starting the HP service (2 processes, 1 thread each) and its wake-up probe (every 2 ms)")
        await demo.start_hp("hp-base", 1)
        await demo.start_hp("hp-burst", 1)
        await demo.start_bg("hp-probe", HP, workload_argv("probe", 2, demo.probe_file))
        alone = await measure(demo, 6 * scale, story.ALONE)
        await start_be(demo, "BE: 5 CPU burners in besteffort/ (2 of them YARN containers)",
                       [("be-low", "batch-low"), ("be-mid", "batch-mid"),
                        ("yarn-am", f"hadoop-yarn/container_e01_{YARN_APP}_01_000001"),
                        ("yarn-c2", f"hadoop-yarn/container_e01_{YARN_APP}_01_000002"),
                        ("be-low-2", "batch-low")])
        contended = await measure(demo, 6 * scale, story.NO_AGENT)
        demo.say("starting the agent")
        agent_task = asyncio.create_task(rt.loop.run(stop))
        with_agent = await measure(demo, 6 * scale, story.WITH_AGENT)
        cuts = []
        for _ in range(2):  # HP load steps down to idle and up again: the BE budget follows
            demo.say("HP load steps down (the HP service pauses): the agent may grow the BE budget")
            demo.signal_hp(signal.SIGSTOP)
            idle_start = _budget(demo)
            await measure(demo, 4 * scale, story.HP_IDLE)
            demo.say("HP load steps up again: the agent should cut the BE budget")
            demo.signal_hp(signal.SIGCONT)
            cut = asyncio.create_task(time_to_cut(demo, _budget(demo), idle_start, 3.0))
            await measure(demo, 3 * scale, story.HP_BUSY)
            cuts.append(await cut)
        hog_ran = await hog_phase(demo, scale)
        await measure(demo, 2, story.after_hog_phase(_evictions(demo)))
        last = rt.board.get()
        records = list(last.recent_actions) if last else []
        demo.load_samples()
        summary = summarize(alone, contended, with_agent, records, cuts, demo, hog_ran,
                            len(rt.cpus), loadavg)
        if plot is not None:
            demo.set_phase("writing plots")
            demo.say("writing plots")
            summary["plot"] = await asyncio.to_thread(write_plot, demo, plot)  # the agent's loop goes on
        liveview.out(json.dumps(summary, indent=2))
        if summary.get("warning"):
            liveview.out(str(summary["warning"]))
        liveview.out(str(summary["verdict"]))
        if out is not None:
            out.write_text(json.dumps(summary, indent=2))
        return summary
    finally:
        demo.set_phase("cleaning up")
        demo.say("stopping the agent and the workloads, removing the private node")
        stop.set()
        if agent_task is not None:
            try:
                await asyncio.wait_for(agent_task, 5)
            except asyncio.CancelledError:
                pass
            except Exception as err:  # the cleanup goes on; the reason is said once
                demo.say(f"the agent ended with an error: {err!r}")
        await asyncio.to_thread(demo.stop_all)
        try:
            await rt.executor.drain(5)
        except Exception as err:
            demo.say(f"waiting for evictions at cleanup failed: {err!r}")
        await asyncio.to_thread(close_trace, rt, trace)
        move_back(back)  # out of the pod first: removing the tree kills what is left in it
        await asyncio.to_thread(remove_tree, rt.writer, rt.reader, "")
        publishing.set()
        if publisher is not None:
            await publisher
        view.stop()
        rt.reader.close()
        shutil.rmtree(tmp, ignore_errors=True)
        liveview.out(f"removed {root} and everything under it")


async def start_be(demo: Demo, what: str, be: list[tuple[str, str]]) -> None:
    """Start BE burners, off the event loop: each enters besteffort (cpu.shares 2) before it execs, so beside
    a busy HP service (or a busy machine) its start-up alone can take seconds; the live view goes on."""
    demo.set_phase("2 starting BE")
    demo.say(f"starting {what}")
    for name, rel in be:
        await demo.start_bg(name, f"{BE_TIER}/{rel}", workload_argv("burn"))


async def hog_phase(demo: Demo, scale: float) -> float:
    """HP steps down to one process and a memory hog grows in BE until the agent evicts (20 s at most once
    the hog runs). The hog enters BE before it execs: on a busy machine that alone can take long; the agent
    and the live view go on meanwhile (the phase says so). Returns how long the hog ran."""
    demo.set_phase(story.HOG_STARTING)
    demo.say("HP load steps down to one process; a memory hog starts in BE (64 MiB every 0.1 s)")
    demo.signal_hp(signal.SIGSTOP, ("hp-burst",))
    await demo.start_bg("be-hog", f"{BE_TIER}/batch-hog", workload_argv("hog", 64, 0.1, 2048))
    hog_started = time.monotonic()
    while time.monotonic() - hog_started < 20 * scale:
        await measure(demo, 1, story.HOG)
        if _evictions(demo) > 0:
            break
    return time.monotonic() - hog_started


def _budget(demo: Demo) -> int | None:
    pub = demo.rt.board.get()
    return pub.be_cpu_granted_milli if pub else None


def _evictions(demo: Demo) -> int:
    pub = demo.rt.board.get()
    return sum(pub.counters.evictions.values()) if pub else 0


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


async def time_to_cut(demo: Demo, budget_before: int | None, idle_start: int | None,
                      limit_s: float) -> story.Cut:
    """Seconds from now until the agent grants BE less than `budget_before`, or why that did not happen
    (`idle_start`: the budget when HP went idle)."""
    if budget_before is None:
        return story.Cut(None, story.no_cut_reason(None, idle_start, None, limit_s))
    start, lowest = time.monotonic(), None
    while time.monotonic() - start < limit_s:
        granted = _budget(demo)
        if granted is not None:
            if granted < budget_before:
                return story.Cut(time.monotonic() - start)
            lowest = granted if lowest is None else min(lowest, granted)
        await asyncio.sleep(0.01)
    return story.Cut(None, story.no_cut_reason(budget_before, idle_start, lowest, limit_s))


def summarize(alone: float, contended: float, with_agent: float, records: list[ActionRecord],
              cuts: list[story.Cut], demo: Demo, hog_ran_s: float = 0.0, ncpus: int = 1,
              loadavg_before: float | None = None) -> dict[str, object]:
    """The demo's figures, the warning (other load on the machine), the verdict line, and why each
    `null` is missing (`why_null`)."""
    evicted = sorted({r.target for r in records if r.kind == "evict" and r.outcome in ("started", "done")})
    alone_p99, no_agent_p99, agent_p99 = (demo.p99_ms.get(k) for k in story.COMPARED)
    budgets = [s["be_budget_milli_cpu"] for s in demo.samples if s["be_budget_milli_cpu"] >= 0]
    other = {k: demo.other_cpus.get(k) for k in (story.PREFLIGHT, *story.COMPARED)}
    other_load = {story.PLOT_LABELS.get(k, "before"): round(v, 2) if v is not None else None
                  for k, v in other.items()}
    warning = story.busy_warning(other, ncpus, loadavg_before)
    figures: dict[str, object] = {
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
        "be_budget_milli_cpu_range": [min(budgets), max(budgets)] if budgets else None,
        "be_cut_after_hp_load_s": [round(c.seconds, 3) if c.seconds is not None else None for c in cuts],
        "evicted": evicted,
        "other_load_cpus": other_load,
        "loadavg_before": loadavg_before,
    }
    reasons = {f"hp_wakeup_p99_ms_{k}": story.p99_reason(p) for k, p in zip(
        ("alone", "no_agent", "with_agent"), story.COMPARED, strict=True)}
    reasons["p99_with_agent_vs_no_agent"] = story.ratio_reason(
        "hp_wakeup_p99_ms_with_agent", agent_p99, "hp_wakeup_p99_ms_no_agent", no_agent_p99)
    reasons["p99_with_agent_vs_alone"] = story.ratio_reason(
        "hp_wakeup_p99_ms_with_agent", agent_p99, "hp_wakeup_p99_ms_alone", alone_p99)
    reasons["ratio_no_agent"] = reasons["ratio_with_agent"] = "HP did no work while alone"
    reasons["be_budget_milli_cpu_range"] = "the agent published no BE budget (it completed no tick)"
    reasons["loadavg_before"] = "/proc/loadavg could not be read"
    reasons.update({f"be_cut_after_hp_load_s[{i}]": c.why or "" for i, c in enumerate(cuts)})
    for label in other_load:
        reasons[f"other_load_cpus.{label}"] = "/proc/stat or the demo's cgroup could not be read"
    why = story.explain_nulls(figures, reasons)
    why.update(story.explain_nulls({f"other_load_cpus.{k}": v for k, v in other_load.items()}, reasons))
    if not evicted:
        peak = max((float(s["mem_pct"]) for s in demo.samples if "mem_pct" in s), default=None)
        why["evicted"] = story.none_evicted_reason(hog_ran_s, peak)
    throughput = {story.ALONE: alone, story.NO_AGENT: contended, story.WITH_AGENT: with_agent}
    return {**figures, "why_null": why, "warning": warning,
            "verdict": story.verdict(demo.p99_ms, throughput, warning)}


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
    p.add_argument("--trace", type=Path, default=Path("coloc-demo-trace"),
                   help="record the agent's trace in this directory, for `coloc-agent replay` (default "
                        "coloc-demo-trace; an earlier demo's trace files in it are replaced; '' for none)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("coloc-agent demo: needs root (it creates cgroups and moves processes into them)",
              file=sys.stderr)
        return 2

    async def guarded() -> None:
        plot = args.plot if str(args.plot) not in ("", ".") else None
        trace = args.trace if str(args.trace) not in ("", ".") else None
        task = asyncio.ensure_future(run_demo(args.scale, args.memory, not args.quiet, args.json_out, plot,
                                              trace))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(guarded())
    return 0

