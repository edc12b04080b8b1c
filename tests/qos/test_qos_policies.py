"""The node's QoS policies in one pipeline: order, de-duplicated evictions, shared pending, fail safe,
config checks."""

from __future__ import annotations

import pytest
from kit.snapshot import MIB, workload
from qos_builders import evicted, holds, snapshot

from qos.actions import Action, Evict, EvictReason, SetBeCpuIdle, SetBeCpuset
from qos.cpu_eviction import CpuEvictionConfig
from qos.failsafe import FailsafeConfig, eviction_blocker
from qos.model import BeTierState, NodeSnapshot, Workload
from qos.pipeline import Pipeline, PipelineState
from qos.policies import PolicyConfig
from qos.registry import node_qos_policies


def decide(snap: NodeSnapshot, cfg: PolicyConfig,
           state: PipelineState | None) -> tuple[list[Action], PipelineState]:
    """Suppression, memory eviction and CPU eviction of one tick, as the agent's pipeline runs them."""
    pipeline = Pipeline(node_qos_policies(cfg))
    return pipeline.decide(snap, state or pipeline.initial_state())

CFG = PolicyConfig(cpu_eviction=CpuEvictionConfig(window_s=2))
# 8 CPUs, BE confined to 2, requesting 4000 and busy: CPU satisfaction 0.5. Memory at 75 % of 1000 MiB.
BE = [
    workload("k8s/big-mem", priority=3000, request_cpu=500, mem=100 * MIB, cpu=400),
    workload("k8s/big-cpu", priority=5000, request_cpu=3000, mem=10 * MIB, cpu=1500),
    workload("k8s/small", priority=5000, request_cpu=500, mem=10 * MIB, cpu=50),
]
HP = workload("k8s/hp", be=False, priority=9000, request_cpu=4000, mem=500 * MIB, cpu=3000)


def node(t: float, workloads: list[Workload] = [HP, *BE], **kw: object) -> NodeSnapshot:  # noqa: B006
    args: dict[str, object] = {
        "cpus": 8,
        "capacity_mem": 1000 * MIB,
        "node_mem": 750 * MIB,
        "hp_cpu": 3000.0,
        "be_cpu": 1950.0,
        "be_tier": BeTierState(cpuset=(6, 7), cpu_idle=True),
        "workloads": workloads,
    }
    args.update(kw)
    return snapshot(t=t, **args)  # type: ignore[arg-type]


def test_runs_every_policy_suppression_first() -> None:
    actions, state = decide(node(0), CFG, None)
    assert isinstance(actions[0], SetBeCpuIdle)
    assert isinstance(actions[1], SetBeCpuset)
    # 8000 × 65 % − 3000 = 2200 → 2 CPUs, the last two.
    assert actions[1].cpus == (6, 7)
    # Memory: need 70 MiB → the lowest priority pod (100 MiB). CPU: its window is not covered yet.
    assert evicted(actions) == ["k8s/big-mem"]
    assert state["memory_eviction"].last_round_at == 0
    assert state["cpu_suppression"].budget_milli == 2200


def test_a_workload_is_evicted_once_and_counts_for_both_needs() -> None:
    _, state = decide(node(0), CFG, None)
    # Next tick big-mem is still listed (its eviction under way): CPU eviction's window is now covered.
    actions, state = decide(node(1), CFG, state)
    evictions = [a for a in actions if isinstance(a, Evict)]
    assert "k8s/big-mem" not in [a.key for a in evictions]
    # CPU need with big-mem pending: request 3500, sat 2000/3500 = 0.571 → 3500 × (0.8 − 0.571) = 800:
    # big-cpu's 3000 covers it; small is spared.
    assert [(a.key, a.reason) for a in evictions] == [("k8s/big-cpu", EvictReason.CPU_SATISFACTION)]
    assert evictions[0].numbers["need_milli_cpu"] == 800
    # Memory sees both victims as pending next tick: no further memory round.
    actions, _ = decide(node(10), CFG, state)
    assert evicted(actions) == []


def test_same_tick_victim_of_memory_is_not_a_cpu_victim() -> None:
    cfg = PolicyConfig(cpu_eviction=CpuEvictionConfig(window_s=1))
    be = [workload("k8s/only", priority=3000, request_cpu=4000, mem=100 * MIB, cpu=1950)]
    actions, state = decide(node(0, workloads=[HP, *be]), cfg, None)
    assert evicted(actions) == ["k8s/only"]
    assert [a.reason for a in actions if isinstance(a, Evict)] == [EvictReason.MEMORY_PRESSURE]
    assert state["cpu_eviction"].last_round_at is None


def test_stale_snapshot_evicts_nothing_and_says_why() -> None:
    actions, _ = decide(node(0, stale={"kubelet": "no answer for 12 s"}), CFG, None)
    assert evicted(actions) == []
    assert any("kubelet (no answer for 12 s)" in r for r in holds(actions))


def test_missing_node_memory_evicts_nothing() -> None:
    actions, _ = decide(node(0, node_mem=None), CFG, None)
    assert evicted(actions) == []
    assert any("missing" in r for r in holds(actions))


def test_zero_capacity_node() -> None:
    snap = snapshot(cpus=(), capacity_cpu=0, capacity_mem=0, node_mem=None, be_cpu=None, workloads=BE)
    actions, _ = decide(snap, CFG, None)
    assert evicted(actions) == []
    assert holds(actions)


def test_no_be_node() -> None:
    actions, state = decide(node(0, workloads=[HP], be_cpu=0.0, node_mem=500 * MIB), CFG, None)
    assert evicted(actions) == [] and holds(actions) == []
    assert state["cpu_eviction"].samples == ()


def test_blocker_lists_every_reason() -> None:
    ws = [workload(f"k8s/w{i}", age=10.0) for i in range(5)]
    snap = snapshot(workloads=ws, stale={"yarn": "HTTP 500"})
    reason = eviction_blocker(snap, FailsafeConfig(max_sample_age_s=5), {"node memory": None, "be cpu": 1.0})
    assert reason is not None
    assert "missing node memory" in reason
    assert "stale sources: yarn (HTTP 500)" in reason
    assert "usage older than 5 s for k8s/w0, k8s/w1, k8s/w2 and 2 more" in reason
    assert eviction_blocker(snapshot(workloads=ws[:1]), FailsafeConfig(max_sample_age_s=20)) is None


def test_nan_sample_age_is_unsafe() -> None:
    snap = snapshot(workloads=[workload("k8s/w", age=float("nan"))])
    assert eviction_blocker(snap, FailsafeConfig()) is not None


def test_policy_config_checks_its_parts() -> None:
    with pytest.raises(ValueError, match="suppression must be a SuppressionConfig"):
        PolicyConfig(suppression={"policy": "cpuset"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"failsafe\.max_sample_age_s"):
        FailsafeConfig(max_sample_age_s=0)
