"""What a tick did reaches what the agent publishes, all of it and once (issue 25).

Every action record of a tick is counted once in /metrics however many a tick has (counts were rebuilt by
diffing a 50-entry ring of recent records, so a tick with more than 50 was undercounted), and an eviction's
end (done or failed, seconds after its tick) appears in `coloc-agent status` and in /metrics (it reached
the audit log only).

The agent here is one real tick loop on a hand-built node: a scripted policy, the real executor (its evictor
a script), the real metrics hub and API server; nothing is read from cgroups."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kit.snapshot import node_snapshot, workload
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.api.client import AgentClient
from agent.api.server import start_api_server
from agent.cli.status import render
from agent.config.api import ApiConfig
from agent.daemon.loop import LoopTiming, TickInputs, TickLoop, TickOutputs
from agent.executors.apply import ActionExecutor, EvictOutcome
from agent.metrics import MetricsHub
from agent.published import Board
from agent.state.ledger import Ledger, LedgerConfig
from cgroups.discovery import Hierarchy
from cgroups.writer import CgroupWriter
from qos.actions import Action, Evict, EvictReason
from qos.admission import BatchBudget
from qos.model import NodeSnapshot, Resources, Source, Workload
from qos.pipeline import Pipeline, Policy
from qos.registry import BeCpuGrant, NodeOutputs

QUIET = NodeOutputs(BeCpuGrant(None, None, ""), BatchBudget(), None)  # no suppression, batch or drain here


def best_effort(name: str) -> Workload:
    return workload(f"local/besteffort/{name}", priority=3000, cpu=None, mem=None)


@dataclass
class Listing:
    """The node's workloads as the next tick lists them."""

    workloads: list[Workload] = field(default_factory=list)

    def list(self) -> tuple[list[Workload], dict[str, str]]:
        return list(self.workloads), {}


class Collected:
    """The collector's part: the listed workloads as they are, no cgroup read."""

    last_duration_s = 0.0

    def collect(self, workloads: Iterable[Workload], terminating: frozenset[str], stale: dict[str, str],
                now: float) -> NodeSnapshot:
        ws = tuple(dataclasses.replace(w, terminating=w.key in terminating) for w in workloads)
        return node_snapshot(ws, taken_at=now, capacity=Resources(4000, 8 << 30), cpus=(0, 1), stale=stale)


@dataclass(frozen=True)
class EvictEach(Policy[frozenset[str]]):
    """Evicts every BE workload it has not evicted before."""

    name: str = "evict_each"

    def initial_state(self) -> frozenset[str]:
        return frozenset()

    def decide(self, snapshot: NodeSnapshot, state: frozenset[str],
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], frozenset[str]]:
        new = [w.key for w in snapshot.workloads if w.be and w.key not in state]
        return [Evict(k, EvictReason.MEMORY_PRESSURE, "scripted") for k in new], state | set(new)


class Scripted:
    """An evictor whose answer per key is set by the test (default: done)."""

    def __init__(self, fails: Iterable[str] = ()) -> None:
        self.fails = set(fails)

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        if workload.key in self.fails:
            return EvictOutcome(False, "scripted failure")
        return EvictOutcome(True, "scripted kill")


@dataclass
class TickAgent:
    loop: TickLoop
    executor: ActionExecutor
    board: Board
    hub: MetricsHub
    node: Listing

    def actions(self) -> dict[tuple[str, str, str], float]:
        """`coloc_actions_total` as /metrics serves it: (policy, kind, outcome) -> count."""
        text = generate_latest(self.hub.registry).decode()
        out: dict[tuple[str, str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "coloc_actions_total":
                    out[(s.labels["policy"], s.labels["kind"], s.labels["outcome"])] = s.value
        return out


def tick_agent(tmp_path: Path, evictor: Scripted) -> TickAgent:
    """The loop over `Listing`, evicting through `evictor` without a rate limit in the way."""
    (tmp_path / "cg").mkdir(exist_ok=True)
    writer = CgroupWriter(Hierarchy.v2(tmp_path), "cg")
    node = Listing()
    executor = ActionExecutor(writer, "besteffort", {Source.LOCAL: evictor}, dry_run=False,
                              rate_per_s=1000.0, burst=1000, recheck_cooldown_s=60.0, audit=lambda _r: None,
                              now=time.monotonic(), tier_owned=True)
    board = Board()
    hub = MetricsHub()
    hub.attach(board)
    inputs = TickInputs(Collected(), node.list)  # type: ignore[arg-type]
    outputs = TickOutputs(board, observers=(hub.observe,))
    pipeline = Pipeline([EvictEach()], lambda _snap, _state: QUIET)
    loop = TickLoop(inputs, lambda: pipeline, executor, outputs,
                    LoopTiming(interval_s=1.0, fast_path=False, fast_poll_s=0.1, fast_hp_jump_milli_cpu=500))
    return TickAgent(loop, executor, board, hub, node)


KEY = ("memory_pressure", "evict", "started")


async def test_a_tick_with_more_than_fifty_records_counts_them_all(tmp_path: Path) -> None:
    a = tick_agent(tmp_path, Scripted())
    a.node.workloads = [best_effort(f"w{i}") for i in range(60)]
    a.loop.tick()
    assert a.actions().get(KEY) == 60, "60 evictions started in one tick"
    a.node.workloads = [best_effort(f"v{i}") for i in range(70)]
    a.loop.tick()
    assert a.actions().get(KEY) == 130, "and 70 more in the next"
    await a.executor.drain(2)


async def test_a_publication_seen_twice_counts_once(tmp_path: Path) -> None:
    a = tick_agent(tmp_path, Scripted())
    a.node.workloads = [best_effort("only")]
    pub = a.loop.tick()
    a.hub.observe(pub)  # the same tick again
    assert a.actions().get(KEY) == 1
    await a.executor.drain(2)
    a.node.workloads = []
    a.loop.tick()
    a.loop.tick()
    assert a.actions().get(KEY) == 1, "a started eviction is counted at its tick only"


async def test_an_evictions_end_appears_in_status_and_metrics(tmp_path: Path) -> None:
    a = tick_agent(tmp_path, Scripted(fails=["local/besteffort/bad"]))
    a.node.workloads = [best_effort("good"), best_effort("bad")]
    a.loop.tick()
    await a.executor.drain(2)
    a.node.workloads = []
    a.loop.tick()  # the tick after the ends
    counts = a.actions()
    assert counts.get(("memory_pressure", "evict", "done")) == 1
    assert counts.get(("memory_pressure", "evict", "failed")) == 1
    with tempfile.TemporaryDirectory(prefix="coloc-tick-") as d:
        ledger = Ledger.open(LedgerConfig(node_id="n", state_path=f"{d}/s.json"))
        server = await start_api_server(ledger, ApiConfig(socket_path=f"{d}/a.sock"), board=a.board)
        try:
            async with AgentClient(f"{d}/a.sock") as c:
                st = await c.status(recent=10)
        finally:
            await server.stop(0)
    ends = {(r.target, r.outcome) for r in st.recent_actions if r.outcome in ("done", "failed")}
    assert ends == {("local/besteffort/good", "done"), ("local/besteffort/bad", "failed")}
    shown = render(st)
    assert "local/besteffort/good" in shown and " done " in shown
    assert "scripted failure" in shown, "the failure's detail is shown"
