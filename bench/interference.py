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
  with_agent_cpuset_quota  the same BE load, the agent running with policy cpuset + `cpuset_quota` (a CFS
                       quota of the formula's budget while it is below the cpuset's whole CPUs)
  naive_1024           the same BE load, besteffort at the default 1024 shares, no agent (naive baseline;
                       left out of `--quick`, which must stay under a minute)

BE load, the same in every case that has one: stress-ng cache thrashing, stream (memory bandwidth) and
matrix workers, plus two CPU burners, in `besteffort/batch-*` and in YARN-style containers under
`besteffort/hadoop-yarn/container_e01_1700000000000_0001_01_00000N`.

The agent runs as it runs on a node: its own `coloc-agent run` process, started with the DaemonSet's
config (deploy/base/config.yaml: standalone, workloads from the cgroup scan) pointed at the private root,
evictions off (so every case runs the same BE load and only suppression differs), and placed as the
DaemonSet places it: a burstable pod inside the node, `burstable/pod-coloc-agent`, `cpu.shares` 51 (its
50m CPU request) and its 256Mi memory limit. The process enters that cgroup before it execs. Per case the
agent's own CPU and wake-ups (all its threads, /proc) are recorded over the measured window; its
/metrics is read once a second during the warm-up (the BE budget it grants) and not in the measured
window, where a scrape a second would add to the agent's cost (Prometheus scrapes every 15 s or more).

Wake-up tail, made robust to a shared machine: a single 10 s p99 moves several-fold between identical
windows here, so the bench runs more rounds of shorter windows (default 6 × 5 s per case, interleaved as
above), cuts every measured window into 1 s blocks (500 probe wake-ups), and reports per case the
**pooled p99** (all of the case's wake-ups) and the **median of the per-block p99s**. Ratios (agent /
no agent, agent / alone) are of pooled p99s, with a 90 % bootstrap interval (1 s blocks resampled, each
case independently), so a ratio is read with its noise. The same figures are given again over the
"quiet" windows only, those in which the rest of the machine (outside the bench's root) used < 150
milli-CPU: the filter is blind to the case, and on a shared machine it removes most of the noise.

Reaction, seen from outside as an operator sees it: with BE running and the agent on, the HP service
(held with SIGSTOP) is resumed at a random point of the agent's tick. The bench reads the BE tier's knob
files (cpuset.cpus, cpu.cfs_quota_us or cpu.max, cpu.idle) every 2 ms and the agent's /metrics
(`coloc_be_cpu_granted_cores`) every 20 ms. knob cut = time until a knob file is cut (the quota by at
least 5 % of capacity, a CPU out of the cpuset, or cpu.idle set); metrics cut = time until the granted
budget drops by 5 % of capacity or to its floor; cut = the earlier of the two. On a 2-CPU node the
cpuset policy keeps BE on one CPU whatever HP does, so its knob files do not move and its cut is the
metrics cut (cpuset+quota sets a quota there, a knob cut). Repeated per agent mode (cpuset, cfsQuota,
cpuset+quota). (The 20 ms scrapes themselves wake the agent's metrics thread: the agent wake-ups counted
per trial include them.)

Acceptance (issue 17), default policy: pooled HP p99 ≤ 1.2× no agent and ≤ 1.5× alone, throughput
≥ 0.97 of alone, reaction cut median ≤ 0.1 s (`acceptance_met`, judged on all windows; read the p99
ratios with their intervals and the quiet-window figures beside them).

Prints a table, writes PNG plots to bench/out/ and prints ONE JSON object on its last line. Needs root
and writable cgroup v1 controllers. Everything it creates is removed, also on Ctrl-C or an error.

    python3 bench/interference.py [--quick] [--seconds N] [--rounds N] [--trials N] [--hp-threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
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
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kit.bench import require_tools
from kit.ports import free_port

from agent.config.agent import load_config
from agent.daemon.cgroup_tree import BE_SHARES, BE_TIER, remove_tree, setup_tiers
from agent.daemon.runtime import machine_capacity
from agent.demo.plots import plot_timeseries
from agent.demo.spawn import spawn_in_cgroup, workload_argv
from agent.demo.workloads import read_counter
from cgroups.discovery import Hierarchy, discover
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.node import read_proc_stat
from cgroups.parsers import parse_cpuset
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.suppression import CFS_QUOTA, CPUSET, SuppressionConfig, effective_min_cpus

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
DAEMONSET_CONFIG = REPO / "deploy" / "base" / "config.yaml"
YARN = "hadoop-yarn"
APP = "1700000000000_0001"
HP_CG, PROBE_CG = "hp-service", "hp-probe"
AGENT_CG = "burstable/pod-coloc-agent"
AGENT_SHARES = 51  # the DaemonSet's 50m CPU request, as the kubelet converts it (50 * 1024 // 1000)
AGENT_MEMORY_LIMIT = 256 << 20  # the DaemonSet's memory limit
PROBE_PERIOD_MS = 2.0
BLOCK_SAMPLES = 500  # probe wake-ups per p99 block: 1 s
SAMPLE_S = 0.25
SCRAPE_EVERY = 4  # /metrics once every SCRAPE_EVERY samples (1 Hz) during the cases
KNOB_POLL_S = 0.002
METRICS_POLL_S = 0.02
BOOTSTRAP = 1000
QUIET_OUTSIDE_MILLI = 150  # a "quiet" window: the rest of the machine used less CPU than this
TARGET_THROUGHPUT_RATIO = 0.97
TARGET_P99_VS_NO_AGENT = 1.2
TARGET_P99_VS_ALONE = 1.5
TARGET_REACTION_S = 0.1
CUT_PERCENT = 5.0  # a cut is a drop of the BE budget by at least this share of capacity (or to the floor)
TRACE_S = 2.0  # how long each reaction trial watches after HP load starts (two ticks at the default 1 s)
CPUSET_QUOTA = "cpuset+quota"
AGENT_MODES: dict[str, dict[str, object]] = {  # the agent's `policies.suppression` per mode
    CPUSET: {"policy": CPUSET},
    CFS_QUOTA: {"policy": CFS_QUOTA},
    CPUSET_QUOTA: {"policy": CPUSET, "cpuset_quota": True},
}
MODE_KEY = {CPUSET: "cpuset", CFS_QUOTA: "cfsquota", CPUSET_QUOTA: "cpuset_quota"}  # in figure names


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    be: bool
    policy: str | None = None  # the agent's mode (AGENT_MODES); None: no agent
    be_shares: int = BE_SHARES
    quick: bool = True  # run under --quick too


CASES = (
    Case("alone", "HP alone", False),
    Case("no_agent", "BE, no agent (shares 2)", True),
    Case("with_agent_cpuset", "BE + agent cpuset+idle", True, CPUSET),
    Case("with_agent_cfsquota", "BE + agent cfsQuota", True, CFS_QUOTA),
    Case("with_agent_cpuset_quota", "BE + agent cpuset+quota", True, CPUSET_QUOTA),
    Case("naive_1024", "BE at 1024 shares (naive)", True, None, 1024, quick=False),
)
DEFAULT_CASE = "with_agent_cpuset"


def ran(runs: list[CaseRun]) -> tuple[Case, ...]:
    """The cases that have runs (`--quick` leaves some out), in CASES order."""
    keys = {r.case for r in runs}
    return tuple(c for c in CASES if c.key in keys)


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
    """Tiers as the kubelet sets them, the HP cgroups, the BE cgroups the load runs in, the agent's pod."""
    setup_tiers(node.writer, node.reader, node.cpus, Layout("cgroupfs", yarn_hierarchy=YARN))
    for rel in (HP_CG, PROBE_CG, AGENT_CG, *(f"{BE_TIER}/{r}" for r, _ in be_load(0))):
        node.writer.mkdir(rel)
    node.writer.set_cpuset(AGENT_CG, node.cpus)
    node.writer.set_cpu_shares(AGENT_CG, AGENT_SHARES)
    node.writer.set_memory_limit(AGENT_CG, AGENT_MEMORY_LIMIT)


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


# -- the agent: its own process, in its own pod cgroup ---------------------------------------------


@dataclass(frozen=True)
class AgentView:
    """What /metrics says: the BE budget granted and its floor (milli-CPU), the fast path's mode."""

    budget: int | None
    floor: int | None
    mode: str


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def view(self) -> AgentView:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return parse_metrics(resp.read().decode())

    def counters(self) -> tuple[int, int]:
        """(run time ns, context switches) summed over every thread of the agent."""
        run_ns = switches = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                run_ns += int((task / "schedstat").read_text().split()[0])
                for line in (task / "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        return run_ns, switches

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def parse_metrics(text: str) -> AgentView:
    budget = floor = None
    mode = "?"
    for line in text.splitlines():
        if line.startswith("coloc_be_cpu_granted_cores"):
            budget = round(float(line.rsplit(" ", 1)[1]) * 1000)
        elif line.startswith("coloc_be_cpu_floor_cores "):
            floor = round(float(line.rsplit(" ", 1)[1]) * 1000)
        elif line.startswith("coloc_fast_path_mode{") and line.rsplit(" ", 1)[1] in ("1", "1.0"):
            mode = line.split('mode="', 1)[1].split('"', 1)[0]
    return AgentView(budget, floor, mode)


def agent_config(node: Node, mode: str, port: int, d: Path) -> Path:
    """The DaemonSet's config, on the private root, with the mode's policy, evictions off, private paths."""
    cfg = yaml.safe_load(DAEMONSET_CONFIG.read_text())
    cfg["node"] = {"name": "bench-node", "scope": "cgroup-root"}
    cfg["cgroups"].update(root=node.root, setup_tiers=True)
    cfg["policies"] = {"suppression": dict(AGENT_MODES[mode]), "cpu_eviction": {"enabled": False},
                       "memory_eviction": {"enabled": False}}
    cfg["metrics"].update(bind="127.0.0.1", port=port)
    cfg["state"].update(path=str(d / "state.json"))
    cfg["api"].update(socket_path=str(d / "agent.sock"))
    cfg["log"].update(level="warning")
    path = d / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    load_config(path)  # fail here, not in the child, on a config the agent would refuse
    return path


async def start_agent(node: Node, mode: str) -> Agent:
    """`coloc-agent run` in the agent's pod cgroup; returns once /metrics shows a BE budget."""
    d = Path(tempfile.mkdtemp(prefix="agent-", dir=node.tmp))
    port = free_port()
    cfg = agent_config(node, mode, port, d)
    log = d / "agent.log"
    with log.open("wb") as out:
        proc = spawn_in_cgroup(node.hierarchy, node.root, AGENT_CG,
                               [sys.executable, "-m", "agent.cli", "run", "--config", str(cfg)],
                               stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    agent = Agent(proc, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited ({proc.returncode}):\n{agent.tail()}")
        with contextlib.suppress(OSError):
            if agent.view().budget is not None:
                return agent
        await asyncio.sleep(0.02)
    await stop_agent(agent)
    raise RuntimeError(f"the agent published no BE budget in 30 s:\n{agent.tail()}")


async def stop_agent(agent: Agent) -> None:
    if agent.proc.poll() is None:
        agent.proc.terminate()
    for _ in range(750):  # 15 s for a clean stop (it releases the BE knobs), then SIGKILL
        if agent.proc.poll() is not None:
            return
        await asyncio.sleep(0.02)
    agent.proc.kill()
    agent.proc.wait(10)


# -- measuring -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counters:
    at: float
    hp_count: int
    probe_bytes: int
    root_ns: int
    be_ns: int
    agent_ns: int  # the agent's pod cgroup
    busy_ticks: int
    total_ticks: int
    ncpu: int


def read_counters(node: Node) -> Counters:
    stat = read_proc_stat()
    probe_bytes = node.probe_file.stat().st_size if node.probe_file.exists() else 0
    return Counters(time.monotonic(), read_counter(str(node.counter)), probe_bytes - probe_bytes % 4,
                    node.cpu_ns(""), node.cpu_ns(BE_TIER), node.cpu_ns(AGENT_CG), stat.cpu.busy,
                    stat.cpu.total, stat.ncpu)


@dataclass(frozen=True)
class Rates:
    hp_units_per_s: float
    be_milli: float
    hp_milli: float  # our root minus BE and the agent: the HP service
    agent_milli: float  # the agent's pod cgroup
    other_milli: float  # everything on the machine outside our root, this process included


def rates(a: Counters, b: Counters) -> Rates:
    dt = max(b.at - a.at, 1e-9)
    root = (b.root_ns - a.root_ns) / 1e6 / dt
    be = (b.be_ns - a.be_ns) / 1e6 / dt
    agent = (b.agent_ns - a.agent_ns) / 1e6 / dt
    total = b.total_ticks - a.total_ticks
    machine = (b.busy_ticks - a.busy_ticks) / total * b.ncpu * 1000 if total > 0 else root
    return Rates((b.hp_count - a.hp_count) / dt, be, root - be - agent, agent, max(0.0, machine - root))


@dataclass(frozen=True)
class Sample:
    t: float
    rates: Rates
    budget_milli: int | None
    quota_milli: int | None
    be_cpus: int


class KnobWatch:
    """The BE tier's knob files, read raw (a few µs each), for a 2 ms poll."""

    def __init__(self, node: Node) -> None:
        w, v1 = node.writer, node.hierarchy.is_v1("cpu")
        self.files = {"cpus": w.path("cpuset", BE_TIER, "cpuset.cpus"),
                      "quota": w.path("cpu", BE_TIER, "cpu.cfs_quota_us" if v1 else "cpu.max"),
                      "idle": w.path("cpu", BE_TIER, "cpu.idle")}

    def read(self) -> tuple[int | None, int, bool]:
        """(quota in milli-CPU or None, CPUs in the cpuset, cpu.idle)."""
        raw = {}
        for k, f in self.files.items():
            try:
                with open(f, "rb") as fh:
                    raw[k] = fh.read()
            except OSError:
                raw[k] = b""
        quota: int | None = None
        q = raw["quota"].split()
        if q and q[0] not in (b"-1", b"max"):
            period = int(q[1]) if len(q) > 1 else 100_000  # v1's period is 100 ms unless set otherwise
            quota = int(q[0]) * 1000 // max(1, period)
        cpus = len(parse_cpuset(raw["cpus"])) if raw["cpus"].strip() else 0
        return quota, cpus, raw["idle"].strip() == b"1"


async def observe(node: Node, agent: Agent | None, seconds: float, t0: float) -> list[Sample]:
    """A sample every SAMPLE_S for `seconds`: HP throughput, CPU use, BE knobs; with `agent`, its budget
    from /metrics once a second (warm-up only: a scrape costs the agent CPU, and Prometheus scrapes a
    node every 15 s or more, so the measured windows are left unscraped)."""
    out: list[Sample] = []
    knobs = KnobWatch(node)
    prev = read_counters(node)
    end = prev.at + seconds
    budget: int | None = None
    while (now := time.monotonic()) < end:
        await asyncio.sleep(min(SAMPLE_S, end - now))
        cur = read_counters(node)
        quota, ncpus, _ = knobs.read()
        if agent is not None and len(out) % SCRAPE_EVERY == 0:
            with contextlib.suppress(OSError):
                budget = agent.view().budget
        out.append(Sample(cur.at - t0, rates(prev, cur), budget, quota, ncpus))
        prev = cur
    return out


@dataclass(frozen=True)
class CaseRun:
    case: str
    round: int
    rates: Rates
    lateness_us: list[int]
    samples: list[Sample]
    agent_cpu_milli: float | None = None  # the agent process's own CPU (all threads) in the window
    agent_wakeups_per_s: float | None = None  # its context switches per second
    fast_path_mode: str | None = None
    first_budget_s: float | None = None  # agent start → its first BE budget on /metrics


def probe_slice(node: Node, start: int, end: int) -> list[int]:
    with open(node.probe_file, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    n = len(data) // 4
    return list(struct.unpack(f"<{n}i", data[: n * 4]))


async def run_case(node: Node, case: Case, rnd: int, warmup: float, seconds: float) -> CaseRun:
    reset_tiers(node, case.be_shares)
    agent: Agent | None = None
    try:
        if case.be:
            start_be(node, warmup + seconds + 90)
        t0 = time.monotonic()
        if case.policy is not None:
            agent = await start_agent(node, case.policy)
        first_s = time.monotonic() - t0 if agent else None
        samples = await observe(node, agent, warmup, t0)
        a, ag0 = read_counters(node), agent.counters() if agent else (0, 0)
        samples += await observe(node, None, seconds, t0)
        b, ag1 = read_counters(node), agent.counters() if agent else (0, 0)
        mode = agent.view().mode if agent else None
    finally:
        if agent is not None:
            await stop_agent(agent)
        if case.be:
            stop_be(node)
        reset_tiers(node)
    dt = max(b.at - a.at, 1e-9)
    cpu, wake = ((ag1[0] - ag0[0]) / 1e6 / dt, (ag1[1] - ag0[1]) / dt) if agent else (None, None)
    return CaseRun(case.key, rnd, rates(a, b), probe_slice(node, a.probe_bytes, b.probe_bytes), samples,
                   cpu, wake, mode, first_s)


@dataclass(frozen=True)
class Trial:
    policy: str
    budget_before: int
    budget_after: int
    cut_s: float | None  # the earlier of knob_s and metrics_s
    knob_s: float | None  # a BE knob file cut (quota, cpuset or cpu.idle)
    metrics_s: float | None  # /metrics: budget cut by ≥ CUT_PERCENT of capacity, or to the floor
    settled_s: float | None  # /metrics: budget within CUT_PERCENT of capacity of where it ended
    agent_wakeups: int
    trace: list[tuple[float, float]]


async def wait_until(pred: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(poll)
    return pred()


class MetricsTrace(threading.Thread):
    """Reads the agent's /metrics every METRICS_POLL_S from t0 until stopped: (t, budget) points."""

    def __init__(self, agent: Agent, t0: float) -> None:
        super().__init__(daemon=True)
        self.agent, self.t0 = agent, t0
        self.points: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(OSError):
                b = self.agent.view().budget
                if b is not None:
                    self.points.append((time.monotonic() - self.t0, b))
            self.done.wait(METRICS_POLL_S)


def knob_cut(before: tuple[int | None, int, bool], now: tuple[int | None, int, bool], step: float) -> bool:
    (q0, c0, i0), (q1, c1, i1) = before, now
    return (q0 is not None and q1 is not None and q1 <= q0 - step) or (q0 is None and q1 is not None) \
        or c1 < c0 or (i1 and not i0)


async def reaction(node: Node, policy: str, trials: int, rng: random.Random) -> list[Trial]:
    """HP load starts (SIGCONT) beside running BE and the agent: how fast is BE cut, seen from outside?"""
    capacity = len(node.cpus) * 1000
    cut_step = capacity * CUT_PERCENT / 100
    idle_budget = capacity * SuppressionConfig().threshold_percent / 100  # the budget with HP idle, about
    if policy == CPUSET_QUOTA:  # what /metrics shows there: the whole CPUs that budget buys
        cfg = SuppressionConfig()
        idle_budget = max(idle_budget // 1000, effective_min_cpus(cfg, len(node.cpus))) * 1000
    idle_level = 0.85 * idle_budget
    reset_tiers(node)
    hp_signal(node, signal.SIGSTOP)
    agent: Agent | None = None
    knobs = KnobWatch(node)
    out: list[Trial] = []
    try:
        start_be(node, trials * 40 + 60)
        agent = await start_agent(node, policy)
        interval = 1.0  # the DaemonSet's loop.interval_s
        for _ in range(trials):
            before, floor = await grown_back(agent, idle_level, interval, rng)
            if before is None or floor is None:
                print(f"  {policy}: BE budget did not grow back to {idle_level:.0f}m; trial skipped",
                      file=sys.stderr)
                continue
            knobs0, wake0 = knobs.read(), agent.counters()[1]
            t0 = time.monotonic()
            hp_signal(node, signal.SIGCONT)
            watch = MetricsTrace(agent, t0)
            watch.start()
            knob = None
            while (t := time.monotonic() - t0) < TRACE_S:
                if knob is None and knob_cut(knobs0, knobs.read(), cut_step):
                    knob = t
                await asyncio.sleep(KNOB_POLL_S)
            watch.done.set()
            watch.join(5)
            hp_signal(node, signal.SIGSTOP)
            trace = [(0.0, float(before)), *((t, float(b)) for t, b in watch.points)]
            after = trace[-1][1]
            metrics = next((t for t, b in trace[1:] if b <= max(floor, before - cut_step)), None)
            settled = next((t for t, b in trace if b <= after + cut_step), None)
            cut = min((v for v in (knob, metrics) if v is not None), default=None)
            out.append(Trial(policy, before, int(after), cut, knob, metrics, settled,
                             agent.counters()[1] - wake0, trace))
            print(f"  reaction {policy:<12} budget {before:>5}m -> {int(after):>5}m  cut {fmt(cut, 3)} s "
                  f"(knob files {fmt(knob, 3)} s, /metrics {fmt(metrics, 3)} s)  settled {fmt(settled, 3)} s"
                  f"  agent wake-ups {out[-1].agent_wakeups}", flush=True)
    finally:
        hp_signal(node, signal.SIGCONT)
        if agent is not None:
            await stop_agent(agent)
        stop_be(node)
        reset_tiers(node)
    return out


async def grown_back(agent: Agent, level: float, interval: float, rng: random.Random,
                     ) -> tuple[int | None, int | None]:
    """(budget, floor) at a random point of the tick once the BE budget is back at `level` (HP idle)."""
    for _ in range(5):  # a shared machine's load can pull the budget down again meanwhile
        if not await wait_until(lambda: (_view(agent).budget or 0) >= level, 30, 0.1):
            break
        await asyncio.sleep(rng.uniform(0, interval))  # start at a random point of the tick
        view = _view(agent)
        if view.budget is not None and view.floor is not None and view.budget >= level:
            return view.budget, view.floor
    return None, None


def _view(agent: Agent) -> AgentView:
    try:
        return agent.view()
    except OSError:
        return AgentView(None, None, "?")


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


def blocks(late: list[int]) -> list[list[int]]:
    """1 s blocks of probe wake-ups (a last block shorter than half is dropped)."""
    out = [late[i:i + BLOCK_SAMPLES] for i in range(0, len(late), BLOCK_SAMPLES)]
    return [b for b in out if len(b) >= BLOCK_SAMPLES // 2]


def pooled_p99(tops: list[list[int]], n: int) -> float:
    """Nearest-rank p99 of `n` pooled wake-ups, from each block's largest values (descending)."""
    rank = n - math.ceil(0.99 * n) + 1  # from the top
    return float(heapq.nlargest(rank, (v for t in tops for v in t[:rank]))[-1])


@dataclass(frozen=True)
class Tail:
    """A case's wake-up tail over all its rounds (ms)."""

    p50: float | None
    p99: float | None  # pooled
    p99_block_median: float | None
    max: float | None
    samples: int
    blocks: int
    boot: list[float]  # bootstrap replicates of the pooled p99


def tail(lateness: list[list[int]], rng: random.Random) -> Tail:
    bl = [b for late in lateness for b in blocks(late)]
    if not bl:
        return Tail(None, None, None, None, 0, 0, [])
    pooled = [v for b in bl for v in b]
    tops = [sorted(b, reverse=True) for b in bl]
    sizes = [len(b) for b in bl]
    boot = []
    for _ in range(BOOTSTRAP):
        pick = [rng.randrange(len(bl)) for _ in bl]
        boot.append(pooled_p99([tops[i] for i in pick], sum(sizes[i] for i in pick)) / 1e3)
    return Tail(percentile(pooled, 0.5) / 1e3, percentile(pooled, 0.99) / 1e3,
                med(percentile(b, 0.99) / 1e3 for b in bl), max(pooled) / 1e3, len(pooled), len(bl), boot)


def ratio_ci(a: Tail, b: Tail) -> tuple[float | None, float | None, float | None]:
    """Pooled p99 ratio a/b and its 90 % bootstrap interval (a's and b's replicates paired at random)."""
    if a.p99 is None or not b.p99 or not a.boot or not b.boot:
        return None, None, None
    rs = sorted(x / y for x, y in zip(a.boot, b.boot, strict=True) if y > 0)
    if not rs:
        return a.p99 / b.p99, None, None
    return a.p99 / b.p99, rs[int(0.05 * (len(rs) - 1))], rs[int(0.95 * (len(rs) - 1))]


def summarize(runs: list[CaseRun], trials: list[Trial], args: argparse.Namespace,
              load_start: float) -> tuple[dict[str, object], list[list[str]]]:
    by = {(r.case, r.round): r for r in runs}
    rounds = sorted({r.round for r in runs})
    rng = random.Random(17)
    cases = ran(runs)
    tails = {c.key: tail([r.lateness_us for r in runs if r.case == c.key], rng) for c in cases}
    quiet = {c.key: tail([r.lateness_us for r in runs if r.case == c.key
                          and r.rates.other_milli < QUIET_OUTSIDE_MILLI], rng) for c in cases}
    figures: dict[str, object] = {
        "bench": "interference", "machine_cpus": len(os.sched_getaffinity(0)), "hp_threads": args.hp_threads,
        "rounds": len(rounds), "seconds_per_phase": args.seconds, "warmup_s": args.warmup,
        "probe_period_ms": PROBE_PERIOD_MS, "p99_block_s": BLOCK_SAMPLES * PROBE_PERIOD_MS / 1000,
        "loadavg_1m_at_start": round(load_start, 2), "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "agent_cgroup": AGENT_CG, "agent_cpu_shares": AGENT_SHARES,
    }
    rows = []
    for case in cases:
        k = case.key
        per = [r for r in runs if r.case == k]
        thr = med(r.rates.hp_units_per_s for r in per)
        thr_ratio = med(by[(k, r)].rates.hp_units_per_s / by[("alone", r)].rates.hp_units_per_s
                        for r in rounds if (k, r) in by and by[("alone", r)].rates.hp_units_per_s > 0)
        t = tails[k]
        vs_alone = ratio_ci(t, tails["alone"])
        vs_none = ratio_ci(t, tails["no_agent"])
        q = quiet[k]
        q_alone, q_none = ratio_ci(q, quiet["alone"]), ratio_ci(q, quiet["no_agent"])
        figures[f"p99_lateness_ms_quiet_{k}"] = rnd(q.p99)
        figures[f"p99_quiet_windows_{k}"] = sum(1 for r in per if r.rates.other_milli < QUIET_OUTSIDE_MILLI)
        be, other = med(r.rates.be_milli for r in per), med(r.rates.other_milli for r in per)
        figures[f"hp_throughput_units_per_s_{k}"] = rnd(thr, 0)
        figures[f"p50_lateness_ms_{k}"] = rnd(t.p50)
        figures[f"p99_lateness_ms_{k}"] = rnd(t.p99)
        figures[f"p99_lateness_ms_block_median_{k}"] = rnd(t.p99_block_median)
        figures[f"max_lateness_ms_{k}"] = rnd(t.max)
        figures[f"p99_blocks_{k}"] = t.blocks
        figures[f"be_cpu_used_milli_{k}"] = rnd(be, 0)
        figures[f"outside_cpu_used_milli_{k}"] = rnd(other, 0)
        if k != "alone":
            figures[f"hp_throughput_ratio_{k}"] = rnd(thr_ratio)
            figures[f"p99_lateness_ratio_{k}"] = rnd(vs_alone[0], 2)
            figures[f"p99_lateness_ratio_ci90_{k}"] = [rnd(vs_alone[1], 2), rnd(vs_alone[2], 2)]
            figures[f"p99_lateness_ratio_quiet_{k}"] = rnd(q_alone[0], 2)
            figures[f"p99_lateness_ratio_quiet_ci90_{k}"] = [rnd(q_alone[1], 2), rnd(q_alone[2], 2)]
        if case.be and k != "no_agent":
            figures[f"p99_vs_no_agent_ratio_{k}"] = rnd(vs_none[0], 2)
            figures[f"p99_vs_no_agent_ratio_ci90_{k}"] = [rnd(vs_none[1], 2), rnd(vs_none[2], 2)]
            figures[f"p99_vs_no_agent_ratio_quiet_{k}"] = rnd(q_none[0], 2)
            figures[f"p99_vs_no_agent_ratio_quiet_ci90_{k}"] = [rnd(q_none[1], 2), rnd(q_none[2], 2)]
        agent_cols = ["-", "-"]
        if case.policy is not None:
            cpu, wake = med(r.agent_cpu_milli for r in per), med(r.agent_wakeups_per_s for r in per)
            figures[f"agent_process_cpu_milli_{k}"] = rnd(cpu, 1)
            figures[f"agent_cgroup_cpu_milli_{k}"] = rnd(med(r.rates.agent_milli for r in per), 1)
            figures[f"agent_wakeups_per_s_{k}"] = rnd(wake, 1)
            figures[f"fast_path_mode_{k}"] = next((r.fast_path_mode for r in per if r.fast_path_mode), None)
            figures[f"agent_start_to_first_budget_s_median_{k}"] = rnd(med(r.first_budget_s for r in per))
            figures[f"target_throughput_met_{k}"] = thr_ratio is not None and \
                thr_ratio >= TARGET_THROUGHPUT_RATIO
            figures[f"target_p99_vs_no_agent_met_{k}"] = vs_none[0] is not None and \
                vs_none[0] <= TARGET_P99_VS_NO_AGENT
            figures[f"target_p99_vs_alone_met_{k}"] = vs_alone[0] is not None and \
                vs_alone[0] <= TARGET_P99_VS_ALONE
            agent_cols = [fmt(cpu, 1), fmt(wake, 1)]
        rows.append([case.label, fmt(thr, 0), "1.000" if k == "alone" else fmt(thr_ratio, 3), fmt(t.p50, 3),
                     fmt(t.p99, 3), fmt(t.p99_block_median, 3),
                     "1.00" if k == "alone" else _with_ci(vs_alone),
                     _with_ci(vs_none) if case.be and k != "no_agent" else "-",
                     fmt(be, 0), *agent_cols, fmt(other, 0),
                     f"{fmt(q.p99, 3)} ({figures[f'p99_quiet_windows_{k}']})",
                     "1.00" if k == "alone" else _with_ci(q_alone),
                     _with_ci(q_none) if case.be and k != "no_agent" else "-"])
    _reaction_figures(figures, trials)
    d = DEFAULT_CASE
    figures["acceptance_met"] = bool(
        figures.get(f"target_throughput_met_{d}") and figures.get(f"target_p99_vs_no_agent_met_{d}")
        and figures.get(f"target_p99_vs_alone_met_{d}") and figures["reaction_target_met"])
    return figures, rows


def _reaction_figures(figures: dict[str, object], trials: list[Trial]) -> None:
    cut_all = [t.cut_s for t in trials if t.cut_s is not None]
    figures["reaction_trials"] = len(trials)
    figures["reaction_s_median"] = rnd(med(cut_all))
    figures["reaction_s_max"] = rnd(max(cut_all)) if cut_all else None
    figures["reaction_never_cut"] = sum(1 for t in trials if t.cut_s is None)
    default = [t.cut_s for t in trials if t.policy == CPUSET]
    figures["reaction_target_met"] = bool(default) and None not in default and \
        statistics.median(t for t in default if t is not None) <= TARGET_REACTION_S
    for policy in AGENT_MODES:
        mine = [t for t in trials if t.policy == policy]
        p = MODE_KEY[policy]
        for name, get in (("reaction_s", lambda t: t.cut_s), ("knob_cut_s", lambda t: t.knob_s),
                          ("metrics_cut_s", lambda t: t.metrics_s), ("settled_s", lambda t: t.settled_s)):
            vals = [v for v in map(get, mine) if v is not None]
            figures[f"{name}_median_{p}"] = rnd(med(vals))
            figures[f"{name}_max_{p}"] = rnd(max(vals)) if vals else None
        figures[f"be_budget_before_milli_median_{p}"] = rnd(med(t.budget_before for t in mine), 0)
        figures[f"be_budget_after_milli_median_{p}"] = rnd(med(t.budget_after for t in mine), 0)
        figures[f"agent_wakeups_per_trial_median_{p}"] = rnd(med(t.agent_wakeups for t in mine), 1)


def _with_ci(r: tuple[float | None, float | None, float | None]) -> str:
    return f"{fmt(r[0])} [{fmt(r[1])}-{fmt(r[2])}]" if r[0] is not None else "-"


def print_table(rows: list[list[str]], figures: dict[str, object]) -> None:
    head = ["case", "HP units/s", "ratio", "p50 ms", "p99 ms", "p99 blk", "p99/alone [90%]",
            "p99/no agent [90%]", "BE m", "agent m", "agent wk/s", "outside m", "quiet: p99 (n)",
            "/alone [90%]", "/no agent [90%]"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                            strict=True))))
    print(f"({figures['rounds']} round(s); p99 pooled over every wake-up of the case, 'p99 blk' the median "
          f"of the {figures['p99_block_s']:g} s blocks' p99s; ratios of pooled p99s with a 90 % bootstrap "
          "interval; "
          "throughput ratio per round against that round's alone, then the median; 'agent m' / 'agent wk/s' "
          "the agent process's CPU (milli) and wake-ups; 'outside m' the CPU used outside the bench's root; "
          f"'quiet' the same over the n windows in which the rest of the machine used < "
          f"{QUIET_OUTSIDE_MILLI}m)")
    for p in AGENT_MODES:
        q = MODE_KEY[p]
        print(f"reaction {p:<12}: cut median {fmt(_f(figures, f'reaction_s_median_{q}'), 3)} s, max "
              f"{fmt(_f(figures, f'reaction_s_max_{q}'), 3)} s (knob files "
              f"{fmt(_f(figures, f'knob_cut_s_median_{q}'), 3)} s, /metrics "
              f"{fmt(_f(figures, f'metrics_cut_s_median_{q}'), 3)} s); settled median "
              f"{fmt(_f(figures, f'settled_s_median_{q}'), 3)} s; BE budget "
              f"{fmt(_f(figures, f'be_budget_before_milli_median_{q}'), 0)}m -> "
              f"{fmt(_f(figures, f'be_budget_after_milli_median_{q}'), 0)}m")
    d = DEFAULT_CASE
    ok = {True: "met", False: "NOT met"}
    print(f"acceptance (default policy): throughput ≥ {TARGET_THROUGHPUT_RATIO} of alone "
          f"{ok[bool(figures[f'target_throughput_met_{d}'])]}; pooled p99 ≤ {TARGET_P99_VS_NO_AGENT:g}× "
          f"no agent {ok[bool(figures[f'target_p99_vs_no_agent_met_{d}'])]}; ≤ {TARGET_P99_VS_ALONE:g}× "
          f"alone {ok[bool(figures[f'target_p99_vs_alone_met_{d}'])]}; reaction median ≤ "
          f"{TARGET_REACTION_S:g} s {ok[bool(figures['reaction_target_met'])]}")


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
    tails: dict[str, list[tuple[float, float]]] = {}
    for c in ran(runs):
        bl = [b for r in runs if r.case == c.key for b in blocks(r.lateness_us)]
        tails[label[c.key]] = [(i + 1.0, percentile(b, 0.99) / 1e3) for i, b in enumerate(bl)]
    written.append(plot_timeseries(OUT / "interference_hp_p99.png",
                                   "HP wake-up p99 of each 1 s block, every round, per case", tails,
                                   "p99 lateness (ms)", "1 s block (rounds one after another)"))
    be: dict[str, list[tuple[float, float]]] = {}
    for c in ran(runs):
        r = mine.get(c.key)
        if r is None or not c.be:
            continue
        be[f"BE used: {c.label}"] = [(s.t, s.rates.be_milli) for s in r.samples]
        if c.policy is not None:
            be[f"BE budget (/metrics): {c.policy}"] = [(s.t, float(s.budget_milli)) for s in r.samples
                                                       if s.budget_milli is not None]
            be[f"agent CPU: {c.policy}"] = [(s.t, s.rates.agent_milli) for s in r.samples]
        if c.policy in (CFS_QUOTA, CPUSET_QUOTA):
            be[f"BE quota file: {c.policy}"] = [(s.t, float(s.quota_milli)) for s in r.samples
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
                                       "BE budget on /metrics after HP load starts at t = 0", series,
                                       "BE budget (milli-CPU)", "time since HP load start (s)"))
    return [str(p.relative_to(REPO)) for p in written]


# -- the run ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, object]:
    load_start = os.getloadavg()[0]
    cases = tuple(c for c in CASES if c.quick or not args.quick)
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
              f"probe every {PROBE_PERIOD_MS:g} ms; agent as its own process in {AGENT_CG} (cpu.shares "
              f"{AGENT_SHARES}); {args.rounds} round(s) of {len(cases)} cases, {args.warmup:g} s warm-up + "
              f"{args.seconds:g} s each; load average {load_start:.2f}", flush=True)
        for r in range(args.rounds):
            for case in (cases if r % 2 == 0 else tuple(reversed(cases))):
                run_ = await run_case(node, case, r, args.warmup, args.seconds)
                runs.append(run_)
                late = run_.lateness_us
                p99 = percentile(late, 0.99) / 1e3 if late else None
                agent = (f"  agent {run_.agent_cpu_milli:.1f}m {run_.agent_wakeups_per_s:.1f} wk/s "
                         f"{run_.fast_path_mode}" if run_.agent_cpu_milli is not None else "")
                print(f"  round {r + 1} {case.label:<26} HP {run_.rates.hp_units_per_s:>8.0f}/s  p99 "
                      f"{fmt(p99, 3)} ms  BE {run_.rates.be_milli:>5.0f}m  outside "
                      f"{run_.rates.other_milli:>5.0f}m{agent}", flush=True)
        rng = random.Random(7)
        for policy in AGENT_MODES:
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
    p.add_argument("--quick", action="store_true", help="short phases, one round, one trial: a smoke run")
    p.add_argument("--seconds", type=float, help="measured seconds per case (default 5; 3 with --quick)")
    p.add_argument("--warmup", type=float,
                   help="seconds before each measurement (default 2; 1.5 with --quick)")
    p.add_argument("--rounds", type=int, help="rounds of all cases (default 6; 1 with --quick)")
    p.add_argument("--trials", type=int, help="reaction trials per agent mode (default 7; 1 with --quick)")
    p.add_argument("--hp-threads", type=int, default=1, choices=(1, 2),
                   help="threads of the HP service (default 1: one core busy, one left to BE)")
    args = p.parse_args(argv)
    quick = args.quick
    defaults = (("seconds", 5.0, 3.0), ("warmup", 2.0, 1.5), ("rounds", 6, 1), ("trials", 7, 1))
    for name, full, short in defaults:
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    if args.seconds <= 0 or args.warmup < 0 or args.rounds < 1 or args.trials < 0:
        p.error("--seconds must be > 0, --warmup ≥ 0, --rounds ≥ 1, --trials ≥ 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    require_tools("bench/interference.py", ("stress-ng",))  # the BE load
    if os.geteuid() != 0:
        print("bench/interference.py: needs root (it creates cgroups and moves processes into them)",
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
