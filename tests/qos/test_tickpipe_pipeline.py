"""The policy pipeline: declared order, victims de-duplicated once, shared pending, forgetting, registration,
and every registered policy driven by a hand-built snapshot alone (batch and drain included)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from dataclasses import dataclass, field

import pytest
from kit.snapshot import GIB, MIB, workload
from qos_builders import evicted, holds, snapshot

from qos.actions import Action, Evict, EvictReason, Hold, HoldReason
from qos.batch import BatchConfig, BatchPolicy, BatchState
from qos.drain import DrainPolicy, Verdict, drain_decision
from qos.memory_eviction import MemoryEvictionPolicy
from qos.model import DrainTerms, DrainView, NodeSnapshot, Source
from qos.pipeline import Pipeline, Policy
from qos.policies import PolicyConfig
from qos.registry import build_pipeline, policies
from qos.suppression import SuppressionPolicy


@dataclass
class Seen:
    """What a scripted policy was given, tick by tick."""

    pending: list[frozenset[str]] = field(default_factory=list)


@dataclass(frozen=True)
class Scripted(Policy[tuple[str, ...]]):
    """Evicts the keys it is told to, remembers them as its victims when `shares`, and logs what it saw."""

    name: str
    evicts: tuple[str, ...] = ()
    shares: bool = True
    seen: Seen = field(default_factory=Seen)
    log: list[str] = field(default_factory=list)

    def initial_state(self) -> tuple[str, ...]:
        return ()

    def decide(self, snapshot: NodeSnapshot, state: tuple[str, ...],
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], tuple[str, ...]]:
        self.log.append(self.name)
        self.seen.pending.append(pending)
        chosen = [k for k in self.evicts if k not in pending]
        acts: list[Action] = [Evict(k, EvictReason.MEMORY_PRESSURE, self.name) for k in chosen]
        return [Hold(self.name, HoldReason.NO_VICTIM, "ran"), *acts], tuple(sorted({*state, *chosen}))

    def victims(self, state: tuple[str, ...]) -> frozenset[str]:
        return frozenset(state) if self.shares else frozenset()

    def forget(self, state: tuple[str, ...], keys: Collection[str]) -> tuple[str, ...]:
        return tuple(k for k in state if k not in keys)


def test_policies_run_in_the_declared_order_and_their_actions_merge_in_it() -> None:
    log: list[str] = []
    pipe = Pipeline([Scripted("c", log=log), Scripted("a", log=log), Scripted("b", log=log)])
    actions, _ = pipe.decide(snapshot(), pipe.initial_state())
    assert log == ["c", "a", "b"]
    assert [a.policy for a in actions if isinstance(a, Hold)] == ["c", "a", "b"]


def test_the_registered_order_is_suppression_memory_cpu_batch_drain() -> None:
    assert [p.name for p in policies(PolicyConfig())] == [
        "cpu_suppression", "memory_eviction", "cpu_eviction", "batch_overcommit", "drain"]


def test_a_victim_is_evicted_once_even_by_a_policy_that_does_not_share() -> None:
    first = Scripted("first", evicts=("k8s/x",))
    loner = Scripted("loner", evicts=("k8s/x", "k8s/y"), shares=False)
    pipe = Pipeline([first, loner])
    actions, _ = pipe.decide(snapshot(), pipe.initial_state())
    assert [(a.key, a.message) for a in actions if isinstance(a, Evict)] == [
        ("k8s/x", "first"), ("k8s/y", "loner")]


def test_pending_is_this_ticks_choice_and_every_other_policys_remembered_victims() -> None:
    early = Scripted("early", evicts=("k8s/a",))
    late = Scripted("late", evicts=("k8s/a", "k8s/b"))
    pipe = Pipeline([early, late])
    _, state = pipe.decide(snapshot(), pipe.initial_state())
    # This tick: `late` saw `early`'s choice and did not pick it; `early` saw nothing yet.
    assert early.seen.pending == [frozenset()] and late.seen.pending == [frozenset({"k8s/a"})]
    assert state["late"] == ("k8s/b",)
    pipe.decide(snapshot(), state)
    # Next tick `early` sees what `late` remembers from the last tick, `late` what `early` remembers.
    assert early.seen.pending[1] == frozenset({"k8s/b"})
    assert late.seen.pending[1] == frozenset({"k8s/a"})


def test_forget_and_refused_reach_each_policy() -> None:
    pipe = Pipeline([Scripted("one", evicts=("k8s/a", "k8s/b")), BatchPolicy(BatchConfig())])
    _, state = pipe.decide(snapshot(), pipe.initial_state())
    assert pipe.forget(state, set()) is state
    out = pipe.refused(pipe.forget(state, {"k8s/a"}), "k8s/b", 5.0)
    assert out["one"] == ("k8s/b",)
    assert out["batch_overcommit"].blocked == {"k8s/b": 5.0}


def test_names_must_be_unique_and_present() -> None:
    with pytest.raises(ValueError, match="'x' is registered twice"):
        Pipeline([Scripted("x"), Scripted("x")])
    with pytest.raises(ValueError, match="needs a name"):
        Pipeline([Scripted("")])


def test_a_policy_added_to_the_registration_runs_last_and_is_de_duplicated() -> None:
    """Adding a policy is one more entry in the registered tuple; nothing else changes."""
    cfg = PolicyConfig()
    be = workload("k8s/be", request_cpu=1000, mem=600 * MIB)
    snap = snapshot(cpus=8, capacity_mem=1000 * MIB, node_mem=900 * MIB, workloads=[be])
    extra = Scripted("network", evicts=("k8s/be",))
    pipe = Pipeline([*policies(cfg), extra])
    actions, state = pipe.decide(snap, pipe.initial_state())
    assert extra.log == ["network"] and "network" in state
    assert [(a.key, a.reason) for a in actions if isinstance(a, Evict)] == [
        ("k8s/be", EvictReason.MEMORY_PRESSURE)], "memory eviction chose it first; the new one may not again"
    assert extra.seen.pending == [frozenset({"k8s/be"})]


# ---------------------------------------------------------------- every policy from a hand-built snapshot

ORIGIN_2 = json.dumps({"resources": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "0"}})


def _batch_node(origin: str | None, **kw: object) -> NodeSnapshot:
    ws = [workload("k8s/old", priority=3000, request_cpu=1000, started_at=1.0),
          workload("k8s/new", priority=3000, request_cpu=2000, started_at=2.0)]
    snap = snapshot(cpus=8, workloads=ws, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(snap, origin_annotation=origin)


def test_batch_policy_reads_its_origin_from_the_snapshot() -> None:
    policy = BatchPolicy(BatchConfig())
    actions, state = policy.decide(_batch_node(ORIGIN_2), policy.initial_state())
    # 3000 requested over an origin of 2000: the newest of the lowest priority releases 2000.
    assert evicted(actions) == ["k8s/new"]
    assert state.origin is not None and state.origin.milli_cpu == 2000
    none, _ = policy.decide(_batch_node(None), BatchState())
    assert holds(none) == ["origin unknown"]
    bad, _ = policy.decide(_batch_node("{"), BatchState())
    assert "origin unusable" in holds(bad)[0] and "not valid JSON" in holds(bad)[0]


def _drain_node(deadline: float, stale: dict[str, str] | None = None) -> NodeSnapshot:
    ws = [workload("local/a", source=Source.LOCAL, priority=1000, mem=GIB),
          workload("local/b", source=Source.LOCAL, priority=5000, mem=GIB),
          workload("k8s/hp", be=False)]
    view = DrainView(DrainTerms(graceful=True, started_at=900.0, deadline=deadline), now=1000.0,
                     pending=("local/c",))
    return dataclasses.replace(snapshot(t=1000.0, workloads=ws, stale=stale or {}), drain=view)


def test_drain_policy_decides_from_the_drain_view_in_the_snapshot() -> None:
    policy = DrainPolicy()
    waiting, _ = policy.decide(_drain_node(deadline=2000.0), policy.initial_state())
    assert waiting == []
    dec = drain_decision(_drain_node(deadline=2000.0))
    assert dec is not None and dec.verdict is Verdict.WAIT_ALLOCATIONS
    assert dec.allocations_left == 3, "two BE workloads and one admitted but not launched"
    late, _ = policy.decide(_drain_node(deadline=999.0), None)
    assert [(a.key, a.reason) for a in late if isinstance(a, Evict)] == [
        ("local/a", EvictReason.DRAIN_TIMEOUT), ("local/b", EvictReason.DRAIN_TIMEOUT)]
    assert policy.decide(_drain_node(deadline=999.0, stale={"yarn": "down"}), None)[0] == []
    assert policy.decide(snapshot(), None)[0] == [], "no drain view: the node is not draining"


def test_the_registered_pipeline_on_one_hand_built_snapshot() -> None:
    """Batch and drain both want the same victims past the drain deadline: each is evicted once."""
    pipe = build_pipeline(PolicyConfig(), BatchConfig())
    ws = [workload("k8s/old", priority=3000, request_cpu=1000, started_at=1.0),
          workload("k8s/new", priority=3000, request_cpu=2000, started_at=2.0)]
    view = DrainView(DrainTerms(graceful=False, started_at=1000.0, deadline=1000.0), now=1000.0)
    snap = dataclasses.replace(snapshot(cpus=8, workloads=ws, hp_cpu=0.0), origin_annotation=ORIGIN_2,
                               drain=view)
    decision = pipe.decide(snap, pipe.initial_state())
    actions = decision.actions
    evictions = [(a.key, a.reason) for a in actions if isinstance(a, Evict)]
    assert evictions == [("k8s/new", EvictReason.BATCH_OVERCOMMIT), ("k8s/old", EvictReason.DRAIN_TIMEOUT)]
    origin = decision.outputs.batch_budget.origin
    assert origin is not None and origin.milli_cpu == 2000
    granted, floor, policy = decision.outputs.be_cpu
    assert policy == "cpuset" and floor is not None and granted is not None and granted >= floor


def test_each_registered_policy_has_a_fresh_state_and_suppression_evicts_nothing() -> None:
    pipe = build_pipeline(PolicyConfig())
    state = pipe.initial_state()
    assert list(state) == [p.name for p in pipe.policies]
    sup = pipe.policy("cpu_suppression")
    assert isinstance(sup, SuppressionPolicy) and sup.victims(state["cpu_suppression"]) == frozenset()
    mem = pipe.policy("memory_eviction")
    assert isinstance(mem, MemoryEvictionPolicy)
    assert pipe.policy("nope") is None
