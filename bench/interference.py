"""HP throughput and wake-up latency beside interfering BE load, without and with the agent, in one run.

On a private cgroup root `coloc-bench-<pid>` laid out as the kubelet lays it out (besteffort
`cpu.shares` 2), one HP service runs for the whole bench: `hp` (CPU-bound, work units per second) in
`hp-service/` and a wake-up probe (`probe`, every 2 ms, how late each wake-up was) in `hp-probe/`.
Cases, alternated round by round (A B C D E, then E D C B A, ...) so that drift on a shared machine
hits every case alike:

  alone                HP only
  no_agent             HP + BE load, tiers as the kubelet sets them, no agent
  with_agent_cpuset    the same BE load, the agent running with policy cpuset (+ cpu.idle), the default
  with_agent_cfsquota  the same BE load, the agent running with policy cfsQuota
  naive_1024           the same BE load, besteffort at the default 1024 shares, no agent (naive baseline)

BE load, the same in every case that has one: stress-ng cache thrashing, stream (memory bandwidth) and
matrix workers, plus two CPU burners, in `besteffort/batch-*` and in YARN-style containers under
`besteffort/hadoop-yarn/container_e01_1700000000000_0001_01_00000N`. The agent's evictions are off, so
every case runs the same BE load and only suppression differs.

Reaction: with BE running and the agent on, the HP service (held with SIGSTOP) is resumed at a random
point of the agent's tick; measured is the time until the BE budget the agent grants
(`Published.be_cpu_granted_milli`) is cut by at least 5 % of capacity (or to its floor), until it has
settled, and until the BE knob file changes. Repeated per policy.

Prints a table, writes PNG plots to bench/out/ and prints ONE JSON object on its last line. Needs root
and writable cgroup v1 controllers. Everything it creates is removed, also on Ctrl-C or an error.

    python3 bench/interference.py [--quick] [--seconds N] [--rounds N] [--trials N] [--hp-threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.config.agent import AgentConfig, CgroupConfig, NodeConfig, StateConfig
from agent.daemon.runtime import (
    BE_SHARES,
    BE_TIER,
    Runtime,
    build,
    machine_capacity,
    remove_tree,
    setup_tiers,
)
from agent.demo.plots import plot_timeseries
from agent.demo.spawn import spawn_in_cgroup, workload_argv
from agent.demo.workloads import read_counter
from cgroups.discovery import Hierarchy, discover
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.node import read_proc_stat
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.cpu_eviction import CpuEvictionConfig
from qos.memory_eviction import MemoryEvictionConfig
from qos.policies import PolicyConfig
from qos.suppression import CFS_QUOTA, CPUSET, SuppressionConfig

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
YARN = "hadoop-yarn"
APP = "1700000000000_0001"
HP_CG, PROBE_CG = "hp-service", "hp-probe"
PROBE_PERIOD_MS = 2.0
SAMPLE_S = 0.25
TARGET_THROUGHPUT_RATIO = 0.90
TARGET_P99_RATIO = 2.0
CUT_PERCENT = 5.0  # a cut is a drop of the BE budget by at least this share of capacity (or to the floor)
TRACE_S = 2.0  # how long each reaction trial watches after HP load starts (two ticks at the default 1 s)


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    be: bool
    policy: str | None = None  # the agent's suppression policy; None: no agent
    be_shares: int = BE_SHARES


CASES = (
    Case("alone", "HP alone", False),
    Case("no_agent", "BE, no agent (shares 2)", True),
    Case("with_agent_cpuset", "BE + agent cpuset+idle", True, CPUSET),
    Case("with_agent_cfsquota", "BE + agent cfsQuota", True, CFS_QUOTA),
    Case("naive_1024", "BE at 1024 shares (naive)", True, None, 1024),
)


def be_load(timeout_s: float) -> list[tuple[str, list[str]]]:
    """(cgroup under besteffort, argv): cache and memory-bandwidth thrashers plus CPU burners."""
    # The timeout is only a safety net should the bench be killed with SIGKILL before it cleans up.
    sng = ["stress-ng", "--quiet", "--timeout", str(math.ceil(timeout_s))]
    return [
        ("batch-cache", [*sng, "--cache", "1", "--cache-no-affinity"]),
        ("batch-stream", [*sng, "--stream", "1", "--stream-l3-size", "32M"]),
        (f"{YARN}/container_e01_{APP}_01_000001", [*sng, "--matrix", "1"]),
        (f"{YARN}/container_e01_{APP}_01_000002", workload_argv("burn")),
        (f"{YARN}/container_e01_{APP}_01_000003", workload_argv("burn")),
    ]


# -- the private node ------------------------------------------------------------------------------


@dataclass
class Node:
    root: str
    hierarchy: Hierarchy
    reader: CgroupReader
    writer: CgroupWriter
    cpus: tuple[int, ...]
    tmp: Path
    hp: subprocess.Popen[bytes] | None = None
    probe: subprocess.Popen[bytes] | None = None
    be_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def counter(self) -> Path:
        return self.tmp / "hp.count"

    @property
    def probe_file(self) -> Path:
        return self.tmp / "probe.bin"

    def spawn(self, rel: str, argv: list[str]) -> subprocess.Popen[bytes]:
        return spawn_in_cgroup(self.hierarchy, self.root, rel, argv,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_ns(self, rel: str) -> int:
        return self.reader.sample(rel).cpu_usage_ns


def make_node(root: str) -> Node:
    hierarchy = discover()
    _, cpus = machine_capacity()
    return Node(root, hierarchy, CgroupReader(hierarchy, root), CgroupWriter(hierarchy, root), cpus,
                Path(tempfile.mkdtemp(prefix="coloc-bench-")))


def lay_out(node: Node) -> None:
    """Tiers as the kubelet sets them, the HP cgroups, and the BE cgroups the load runs in."""
    setup_tiers(node.writer, node.reader, node.cpus, Layout("cgroupfs", yarn_hierarchy=YARN))
    for rel in (HP_CG, PROBE_CG, *(f"{BE_TIER}/{r}" for r, _ in be_load(0))):
        node.writer.mkdir(rel)


def reset_tiers(node: Node, shares: int = BE_SHARES) -> None:
    """Undo what an agent run left on the BE tier (cpu.idle, quota, cpuset) and set its shares."""
    w = node.writer
    w.set_cpu_quota(BE_TIER, None)
    with contextlib.suppress(CgroupError):  # a kernel without cpu.idle
        w.set_cpu_idle(BE_TIER, False)  # leaving idle resets the weight: shares are set below
    w.set_cpuset(BE_TIER, node.cpus, descendants=True)
    w.set_cpu_shares(BE_TIER, shares)


def start_be(node: Node, timeout_s: float) -> None:
    for rel, argv in be_load(timeout_s):
        node.be_procs.append(node.spawn(f"{BE_TIER}/{rel}", argv))


def stop_be(node: Node) -> None:
    """Kill every process under besteffort (stress-ng workers too) and reap the ones we started."""
    for rel in reversed(node.reader.walk(BE_TIER)):
        with contextlib.suppress(CgroupError):
            node.writer.kill_all(rel, signal.SIGKILL)
    for p in node.be_procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.kill()
            p.wait(5)
    node.be_procs.clear()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(node.reader.pids(r) for r in node.reader.walk(BE_TIER)):
        time.sleep(0.02)


def hp_signal(node: Node, sig: int) -> None:
    if node.hp is not None and node.hp.poll() is None:
        os.kill(node.hp.pid, sig)


def cleanup(node: Node) -> None:
    for p in (node.hp, node.probe, *node.be_procs):
        if p is not None and p.poll() is None:
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
    remove_tree(node.writer, node.reader, "")
    node.reader.close()
    shutil.rmtree(node.tmp, ignore_errors=True)


# -- the agent -------------------------------------------------------------------------------------


@dataclass
class Agent:
    rt: Runtime
    stop: asyncio.Event
    task: asyncio.Task[None]

    def budget(self) -> int | None:
        pub = self.rt.board.get()
        return pub.be_cpu_granted_milli if pub else None

    def floor(self) -> int | None:
        pub = self.rt.board.get()
        return pub.be_cpu_floor_milli if pub else None


def agent_config(root: str, policy: str) -> AgentConfig:
    """Defaults everywhere (1 s tick, fast path on, threshold 65 %) except: the policy, and no eviction."""
    pol = PolicyConfig(suppression=SuppressionConfig(policy=policy),
                       cpu_eviction=CpuEvictionConfig(enabled=False),
                       memory_eviction=MemoryEvictionConfig(enabled=False))
    return AgentConfig(node=NodeConfig(name="bench-node", scope="cgroup-root"),
                       cgroups=CgroupConfig(root=root, setup_tiers=True, yarn_hierarchy=YARN),
                       policies=pol, state=StateConfig(path=""))  # never the node's real state file


def start_agent(node: Node, policy: str) -> Agent:
    rt = build(agent_config(node.root, policy))
    stop = asyncio.Event()
    return Agent(rt, stop, asyncio.create_task(rt.loop.run(stop)))


async def stop_agent(agent: Agent) -> None:
    agent.stop.set()
    try:
        await asyncio.wait_for(agent.task, 10)
    finally:
        with contextlib.suppress(Exception):
            await agent.rt.executor.drain(5)
        agent.rt.reader.close()
        agent.rt.audit.close()


# -- measuring -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counters:
    at: float
    hp_count: int
    probe_bytes: int
    root_ns: int
    be_ns: int
    busy_ticks: int
    total_ticks: int
    ncpu: int


def read_counters(node: Node) -> Counters:
    stat = read_proc_stat()
    probe_bytes = node.probe_file.stat().st_size if node.probe_file.exists() else 0
    return Counters(time.monotonic(), read_counter(str(node.counter)), probe_bytes - probe_bytes % 4,
                    node.cpu_ns(""), node.cpu_ns(BE_TIER), stat.cpu.busy, stat.cpu.total, stat.ncpu)


@dataclass(frozen=True)
class Rates:
    hp_units_per_s: float
    be_milli: float
    hp_milli: float  # our root minus BE: the HP service
    other_milli: float  # everything on the machine outside our root, this process included


def rates(a: Counters, b: Counters) -> Rates:
    dt = max(b.at - a.at, 1e-9)
    root = (b.root_ns - a.root_ns) / 1e6 / dt
    be = (b.be_ns - a.be_ns) / 1e6 / dt
    total = b.total_ticks - a.total_ticks
    machine = (b.busy_ticks - a.busy_ticks) / total * b.ncpu * 1000 if total > 0 else root
    return Rates((b.hp_count - a.hp_count) / dt, be, root - be, max(0.0, machine - root))


@dataclass(frozen=True)
class Sample:
    t: float
    rates: Rates
    budget_milli: int | None
    quota_milli: int | None
    be_cpus: int


def be_knobs(node: Node) -> tuple[int | None, int]:
    """(BE tier quota in milli-CPU or None, number of CPUs in its cpuset)."""
    k = node.reader.read_knobs(BE_TIER)
    quota = None if k.quota_us is None else k.quota_us * 1000 // max(1, k.period_us or 100_000)
    return quota, len(k.cpuset or ())


async def observe(node: Node, agent: Agent | None, seconds: float, t0: float) -> list[Sample]:
    """A sample every SAMPLE_S for `seconds`: HP throughput, CPU use, the agent's budget, BE knobs."""
    out: list[Sample] = []
    prev = read_counters(node)
    end = prev.at + seconds
    while (now := time.monotonic()) < end:
        await asyncio.sleep(min(SAMPLE_S, end - now))
        cur = read_counters(node)
        quota, ncpus = be_knobs(node)
        out.append(Sample(cur.at - t0, rates(prev, cur), agent.budget() if agent else None, quota, ncpus))
        prev = cur
    return out


@dataclass(frozen=True)
class CaseRun:
    case: str
    round: int
    rates: Rates
    lateness_us: list[int]
    samples: list[Sample]
    fast_wakeups: int
    first_budget_s: float | None = None  # agent start → its first BE budget (None: no agent / not yet)


async def first_budget_s(agent: Agent, t0: float) -> float | None:
    """Seconds from `t0` (agent start) until the agent first publishes a BE budget."""
    while agent.budget() is None:
        await asyncio.sleep(0.005)
    return time.monotonic() - t0


def probe_slice(node: Node, start: int, end: int) -> list[int]:
    with open(node.probe_file, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    n = len(data) // 4
    return list(struct.unpack(f"<{n}i", data[: n * 4]))


async def run_case(node: Node, case: Case, rnd: int, warmup: float, seconds: float) -> CaseRun:
    reset_tiers(node, case.be_shares)
    agent: Agent | None = None
    first: asyncio.Task[float | None] | None = None
    try:
        if case.be:
            start_be(node, warmup + seconds + 60)
        t0 = time.monotonic()
        if case.policy is not None:
            agent = start_agent(node, case.policy)
            first = asyncio.create_task(first_budget_s(agent, t0))
        samples = await observe(node, agent, warmup, t0)
        first_s = first.result() if first is not None and first.done() else None
        a = read_counters(node)
        samples += await observe(node, agent, seconds, t0)
        b = read_counters(node)
        wakeups = agent.rt.loop.wakeups if agent else 0
    finally:
        if first is not None:
            first.cancel()
        if agent is not None:
            await stop_agent(agent)
        if case.be:
            stop_be(node)
        reset_tiers(node)
    return CaseRun(case.key, rnd, rates(a, b), probe_slice(node, a.probe_bytes, b.probe_bytes), samples,
                   wakeups, first_s)


@dataclass(frozen=True)
class Trial:
    policy: str
    budget_before: int
    budget_after: int
    cut_s: float | None  # first cut of ≥ CUT_PERCENT of capacity, or to the floor
    settled_s: float | None  # budget within CUT_PERCENT of capacity of where it ended
    knob_s: float | None  # the BE knob file (quota / cpuset) cut
    fast_wakeups: int
    trace: list[tuple[float, float]]


async def wait_until(pred: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(poll)
    return pred()


async def reaction(node: Node, policy: str, trials: int, rng: random.Random) -> list[Trial]:
    """HP load starts (SIGCONT) beside running BE and the agent: how fast is BE cut?"""
    capacity = len(node.cpus) * 1000
    cut_step = capacity * CUT_PERCENT / 100
    idle_level = 0.85 * capacity * SuppressionConfig().threshold_percent / 100  # budget with HP idle, about
    reset_tiers(node)
    hp_signal(node, signal.SIGSTOP)
    agent: Agent | None = None
    out: list[Trial] = []
    try:
        start_be(node, trials * 40 + 60)
        agent = start_agent(node, policy)
        interval = agent.rt.cfg.loop.interval_s
        for _ in range(trials):
            grown = await wait_until(lambda: (agent.budget() or 0) >= idle_level, 30)
            await asyncio.sleep(rng.uniform(0, interval))  # start at a random point of the tick
            before, floor = agent.budget(), agent.floor()
            if not grown or before is None or floor is None:
                print(f"  {policy}: BE budget did not grow back to {idle_level:.0f}m (at {before}); "
                      "trial skipped", file=sys.stderr)
                continue
            quota0, cpus0 = be_knobs(node)
            wakeups0 = agent.rt.loop.wakeups
            t0 = time.monotonic()
            hp_signal(node, signal.SIGCONT)
            trace: list[tuple[float, float]] = [(0.0, float(before))]
            cut = knob = None
            while (t := time.monotonic() - t0) < TRACE_S:
                b = agent.budget()
                if b is not None:
                    trace.append((t, float(b)))
                    if cut is None and b <= max(floor, before - cut_step):
                        cut = t
                if knob is None:
                    quota, ncpus = be_knobs(node)
                    if (quota0 is not None and quota is not None and quota <= quota0 - cut_step) or \
                            ncpus < cpus0:
                        knob = t
                await asyncio.sleep(0.005)
            hp_signal(node, signal.SIGSTOP)
            after = trace[-1][1]
            settled = next((t for t, b in trace if b <= after + cut_step), None)
            out.append(Trial(policy, before, int(after), cut, settled, knob,
                             agent.rt.loop.wakeups - wakeups0, trace))
            print(f"  reaction {policy:<9} budget {before:>5}m -> {int(after):>5}m  cut "
                  f"{fmt(cut, 3)} s  settled {fmt(settled, 3)} s  knob {fmt(knob, 3)} s  "
                  f"fast-path wake-ups {out[-1].fast_wakeups}", flush=True)
    finally:
        hp_signal(node, signal.SIGCONT)
        if agent is not None:
            await stop_agent(agent)
        stop_be(node)
        reset_tiers(node)
    return out


# -- figures ---------------------------------------------------------------------------------------


def fmt(v: float | None, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def percentile(values: list[int], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return float(s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))])


def med(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def rnd(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


@dataclass(frozen=True)
class RoundFigures:
    throughput: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    samples: int
    be_milli: float
    other_milli: float


def round_figures(run: CaseRun) -> RoundFigures:
    late = run.lateness_us
    if not late:
        return RoundFigures(run.rates.hp_units_per_s, None, None, None, 0, run.rates.be_milli,
                            run.rates.other_milli)
    return RoundFigures(run.rates.hp_units_per_s, percentile(late, 0.5) / 1e3, percentile(late, 0.99) / 1e3,
                        max(late) / 1e3, len(late), run.rates.be_milli, run.rates.other_milli)


def summarize(runs: list[CaseRun], trials: list[Trial], args: argparse.Namespace,
              load_start: float) -> tuple[dict[str, object], list[list[str]]]:
    by: dict[tuple[str, int], RoundFigures] = {(r.case, r.round): round_figures(r) for r in runs}
    rounds = sorted({r.round for r in runs})
    figures: dict[str, object] = {
        "bench": "interference", "machine_cpus": len(os.sched_getaffinity(0)), "hp_threads": args.hp_threads,
        "rounds": len(rounds), "seconds_per_phase": args.seconds, "warmup_s": args.warmup,
        "probe_period_ms": PROBE_PERIOD_MS, "loadavg_1m_at_start": round(load_start, 2),
    }
    rows = []
    for case in CASES:
        per = [by[(case.key, r)] for r in rounds if (case.key, r) in by]
        thr = med(f.throughput for f in per)
        p50, p99 = med(f.p50_ms for f in per), med(f.p99_ms for f in per)
        mx = max((f.max_ms for f in per if f.max_ms is not None), default=None)
        thr_ratio = med(by[(case.key, r)].throughput / by[("alone", r)].throughput
                        for r in rounds if by[("alone", r)].throughput > 0)
        p99_ratio = med(_ratio(by[(case.key, r)].p99_ms, by[("alone", r)].p99_ms) for r in rounds)
        be, other = med(f.be_milli for f in per), med(f.other_milli for f in per)
        k = case.key
        figures[f"hp_throughput_units_per_s_{k}"] = rnd(thr, 0)
        figures[f"p50_lateness_ms_{k}"] = rnd(p50)
        figures[f"p99_lateness_ms_{k}"] = rnd(p99)
        figures[f"max_lateness_ms_{k}"] = rnd(mx)
        figures[f"be_cpu_used_milli_{k}"] = rnd(be, 0)
        figures[f"outside_cpu_used_milli_{k}"] = rnd(other, 0)
        if k != "alone":
            figures[f"hp_throughput_ratio_{k}"] = rnd(thr_ratio)
            figures[f"p99_lateness_ratio_{k}"] = rnd(p99_ratio, 2)
        if case.policy is not None:
            figures[f"target_throughput_met_{k}"] = (thr_ratio is not None
                                                     and thr_ratio >= TARGET_THROUGHPUT_RATIO)
            figures[f"target_p99_met_{k}"] = p99_ratio is not None and p99_ratio <= TARGET_P99_RATIO
            figures[f"fast_path_wakeups_{k}"] = sum(r.fast_wakeups for r in runs if r.case == k)
            figures[f"agent_start_to_first_budget_s_median_{k}"] = rnd(
                med(r.first_budget_s for r in runs if r.case == k))
        rows.append([case.label, fmt(thr, 0), "1.000" if k == "alone" else fmt(thr_ratio, 3), fmt(p50, 3),
                     fmt(p99, 3), fmt(mx, 2), "1.00" if k == "alone" else fmt(p99_ratio, 2), fmt(be, 0),
                     fmt(other, 0)])
    cut_all = [t.cut_s for t in trials if t.cut_s is not None]
    figures["reaction_trials"] = len(trials)
    figures["reaction_s_median"] = rnd(med(cut_all))
    figures["reaction_s_max"] = rnd(max(cut_all)) if cut_all else None
    figures["reaction_never_cut"] = sum(1 for t in trials if t.cut_s is None)
    figures["reaction_target_sub_second_met"] = bool(cut_all) and len(cut_all) == len(trials) and \
        max(cut_all) < 1.0
    for policy in (CPUSET, CFS_QUOTA):
        mine = [t for t in trials if t.policy == policy]
        p = policy.lower()
        for name, get in (("reaction_s", lambda t: t.cut_s), ("settled_s", lambda t: t.settled_s),
                          ("knob_cut_s", lambda t: t.knob_s)):
            vals = [v for v in map(get, mine) if v is not None]
            figures[f"{name}_median_{p}"] = rnd(med(vals))
            figures[f"{name}_max_{p}"] = rnd(max(vals)) if vals else None
        figures[f"be_budget_before_milli_median_{p}"] = rnd(med(t.budget_before for t in mine), 0)
        figures[f"be_budget_after_milli_median_{p}"] = rnd(med(t.budget_after for t in mine), 0)
        figures[f"fast_path_wakeups_per_trial_median_{p}"] = rnd(med(t.fast_wakeups for t in mine), 1)
    return figures, rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_table(rows: list[list[str]], figures: dict[str, object]) -> None:
    head = ["case", "HP units/s", "ratio", "p50 ms", "p99 ms", "max ms", "p99/alone", "BE milli",
            "outside milli"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                            strict=True))))
    print(f"(medians over {figures['rounds']} round(s); ratio and p99/alone per round against that round's "
          "alone, then the median; 'outside milli' is CPU used on this machine outside the bench's root)")
    for p in (CPUSET, CFS_QUOTA):
        q = p.lower()
        print(f"reaction {p:<9}: cut median {fmt(_f(figures, f'reaction_s_median_{q}'), 3)} s, max "
              f"{fmt(_f(figures, f'reaction_s_max_{q}'), 3)} s; settled median "
              f"{fmt(_f(figures, f'settled_s_median_{q}'), 3)} s; knob file cut median "
              f"{fmt(_f(figures, f'knob_cut_s_median_{q}'), 3)} s; BE budget "
              f"{fmt(_f(figures, f'be_budget_before_milli_median_{q}'), 0)}m -> "
              f"{fmt(_f(figures, f'be_budget_after_milli_median_{q}'), 0)}m")
    for c in CASES:
        if c.policy is not None:
            thr_ok = "met" if figures[f"target_throughput_met_{c.key}"] else "NOT met"
            p99_ok = "met" if figures[f"target_p99_met_{c.key}"] else "NOT met"
            print(f"targets {c.label}: throughput ≥ {TARGET_THROUGHPUT_RATIO} of alone: {thr_ok}; "
                  f"p99 ≤ {TARGET_P99_RATIO:g}× alone: {p99_ok}")
    print(f"reaction sub-second: {'met' if figures['reaction_target_sub_second_met'] else 'NOT met'}")


def _f(figures: dict[str, object], key: str) -> float | None:
    v = figures.get(key)
    return float(v) if isinstance(v, int | float) else None


def plots(runs: list[CaseRun], trials: list[Trial]) -> list[str]:
    last = max(r.round for r in runs)
    mine = {r.case: r for r in runs if r.round == last}
    label = {c.key: c.label for c in CASES}
    written = [plot_timeseries(
        OUT / "interference_hp_throughput.png", f"HP throughput per case (round {last + 1})",
        {label[k]: [(s.t, s.rates.hp_units_per_s) for s in r.samples] for k, r in mine.items()},
        "HP work units / s")]
    be: dict[str, list[tuple[float, float]]] = {}
    for c in CASES:
        r = mine.get(c.key)
        if r is None or not c.be:
            continue
        be[f"BE used: {c.label}"] = [(s.t, s.rates.be_milli) for s in r.samples]
        if c.policy is not None:
            be[f"BE budget: {c.policy}"] = [(s.t, float(s.budget_milli)) for s in r.samples
                                            if s.budget_milli is not None]
        if c.policy == CFS_QUOTA:
            be["BE quota file: cfsQuota"] = [(s.t, float(s.quota_milli)) for s in r.samples
                                             if s.quota_milli is not None]
    written.append(plot_timeseries(OUT / "interference_be_cpu.png",
                                   f"BE CPU used and granted, with and without the agent (round {last + 1})",
                                   be, "milli-CPU"))
    if trials:
        counts: dict[str, int] = {}
        series = {}
        for t in trials:
            counts[t.policy] = counts.get(t.policy, 0) + 1
            series[f"{t.policy} #{counts[t.policy]}"] = t.trace
        written.append(plot_timeseries(OUT / "interference_reaction.png",
                                       "BE budget after HP load starts at t = 0", series,
                                       "BE budget (milli-CPU)", "time since HP load start (s)"))
    return [str(p.relative_to(REPO)) for p in written]


# -- the run ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, object]:
    load_start = os.getloadavg()[0]
    node = make_node(f"coloc-bench-{os.getpid()}")
    runs: list[CaseRun] = []
    trials: list[Trial] = []
    try:
        lay_out(node)
        node.hp = node.spawn(HP_CG, workload_argv("hp", args.hp_threads, node.counter))
        node.probe = node.spawn(PROBE_CG, workload_argv("probe", PROBE_PERIOD_MS, node.probe_file))
        if not await wait_until(lambda: read_counter(str(node.counter)) > 0 and node.probe_file.exists(), 15):
            raise RuntimeError("the HP service or the probe did not start")
        print(f"interference bench on {node.root}: {len(node.cpus)} CPUs, HP {args.hp_threads} thread(s) + "
              f"probe every {PROBE_PERIOD_MS:g} ms; {args.rounds} round(s) of {len(CASES)} cases, "
              f"{args.warmup:g} s warm-up + {args.seconds:g} s each; load average {load_start:.2f}",
              flush=True)
        for r in range(args.rounds):
            for case in (CASES if r % 2 == 0 else tuple(reversed(CASES))):
                run_ = await run_case(node, case, r, args.warmup, args.seconds)
                runs.append(run_)
                f = round_figures(run_)
                print(f"  round {r + 1} {case.label:<26} HP {f.throughput:>8.0f}/s  p50 {fmt(f.p50_ms, 3)} "
                      f"p99 {fmt(f.p99_ms, 3)} max {fmt(f.max_ms, 2)} ms  BE {f.be_milli:>5.0f}m  "
                      f"outside {f.other_milli:>5.0f}m", flush=True)
        rng = random.Random(7)
        for policy in (CPUSET, CFS_QUOTA):
            trials += await reaction(node, policy, args.trials, rng)
    finally:
        cleanup(node)
        print(f"removed {node.root} and everything under it", flush=True)
    figures, rows = summarize(runs, trials, args, load_start)
    figures["plots"] = plots(runs, trials)
    print_table(rows, figures)
    return figures


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/interference.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short phases, one round, two trials: a smoke run")
    p.add_argument("--seconds", type=float, help="measured seconds per case (default 10; 3 with --quick)")
    p.add_argument("--warmup", type=float,
                   help="seconds before each measurement (default 3; 1.5 with --quick)")
    p.add_argument("--rounds", type=int, help="rounds of all cases (default 3; 1 with --quick)")
    p.add_argument("--trials", type=int, help="reaction trials per policy (default 7; 2 with --quick)")
    p.add_argument("--hp-threads", type=int, default=1, choices=(1, 2),
                   help="threads of the HP service (default 1: one core busy, one left to BE)")
    args = p.parse_args(argv)
    quick = args.quick
    defaults = (("seconds", 10.0, 3.0), ("warmup", 3.0, 1.5), ("rounds", 3, 1), ("trials", 7, 2))
    for name, full, short in defaults:
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    if args.seconds <= 0 or args.warmup < 0 or args.rounds < 1 or args.trials < 0:
        p.error("--seconds must be > 0, --warmup ≥ 0, --rounds ≥ 1, --trials ≥ 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench/interference.py: needs root (it creates cgroups and moves processes into them)",
              file=sys.stderr)
        return 2
    if shutil.which("stress-ng") is None:
        print("bench/interference.py: stress-ng is not installed (Debian: apt-get install stress-ng)",
              file=sys.stderr)
        return 2
    result: dict[str, object] = {}

    async def guarded() -> None:
        task = asyncio.ensure_future(run(args))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        result.update(await task)

    try:
        asyncio.run(guarded())
    except asyncio.CancelledError:
        print("interrupted: everything the bench made was removed", file=sys.stderr)
        return 130
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
