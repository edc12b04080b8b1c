"""Memory eviction from hand-made snapshots: threshold, just-enough release, cool-down, pending, fail safe."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.snapshot import GIB, MIB, workload
from qos_builders import evicted, holds, snapshot

from qos.actions import Evict, EvictReason
from qos.failsafe import FailsafeConfig
from qos.memory_eviction import MemoryEvictionConfig, MemoryEvictionState, decide
from qos.model import Workload

CFG = MemoryEvictionConfig()
HP = workload("k8s/hp", be=False, priority=9000, mem=4 * GIB)


def pods(*specs: tuple[str, int, int]) -> list[Workload]:
    return [workload(f"k8s/{name}", priority=prio, mem=mib * MIB) for name, prio, mib in specs]


def test_below_threshold_nothing() -> None:
    snap = snapshot(capacity_mem=10 * GIB, node_mem=int(6.9 * GIB), workloads=[HP, *pods(("a", 5000, 900))])
    assert decide(snap, CFG, MemoryEvictionState()) == ([], MemoryEvictionState())


def test_release_just_enough_down_to_lower() -> None:
    # 10 GiB node at 7.5 GiB (75 %): lower 68 % → release 0.7 GiB = 716.8 MiB.
    be = pods(
        ("free-small", 3000, 100), ("batch-big", 5000, 600), ("batch-mid", 5000, 400), ("mid", 7000, 2000)
    )
    snap = snapshot(t=50, capacity_mem=10 * GIB, node_mem=int(7.5 * GIB), workloads=[HP, *be])
    actions, state = decide(snap, CFG, MemoryEvictionState())
    # free first (priority), then the biggest batch pod: 100 + 600 = 700 < 716.8, then batch-mid: 1100 ≥ need.
    assert evicted(actions) == ["k8s/free-small", "k8s/batch-big", "k8s/batch-mid"]
    first = actions[0]
    assert isinstance(first, Evict)
    assert first.reason is EvictReason.MEMORY_PRESSURE
    assert first.release_memory_bytes == 100 * MIB
    assert first.numbers["need_bytes"] == int(7.5 * GIB) - int(10 * GIB * 0.68)
    assert first.numbers["usage_percent"] == pytest.approx(75.0)
    assert state.last_round_at == 50
    assert {k for k, _ in state.evicted} == set(evicted(actions))


def test_threshold_and_lower_are_configurable() -> None:
    cfg = MemoryEvictionConfig(threshold_percent=50, lower_percent=40)
    be = pods(("a", 5000, 500), ("b", 5000, 400))
    snap = snapshot(capacity_mem=10 * GIB, node_mem=int(4.5 * GIB), workloads=be)
    actions, _ = decide(snap, cfg, MemoryEvictionState())
    assert evicted(actions) == []
    snap = snapshot(capacity_mem=10 * GIB, node_mem=int(5.0 * GIB), workloads=be)
    actions, _ = decide(snap, cfg, MemoryEvictionState())
    assert evicted(actions) == ["k8s/a", "k8s/b"]  # 1 GiB needed: 500 + 400 MiB < 1024, both go


def test_one_round_per_cool_down() -> None:
    be = pods(("a", 5000, 100), ("b", 5000, 100), ("c", 5000, 100))
    snap = snapshot(t=10, capacity_mem=1000 * MIB, node_mem=750 * MIB, workloads=be)
    actions, state = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == ["k8s/a"]  # 750 − 680 = 70 MiB
    # A new pressure 2 s later (the first victim already gone): cool-down holds, visibly.
    later = snapshot(t=12, capacity_mem=1000 * MIB, node_mem=800 * MIB, workloads=be[1:])
    actions, state2 = decide(later, CFG, state)
    assert evicted(actions) == []
    assert any("cool-down" in r for r in holds(actions))
    # After 4 s the next round may go.
    later = snapshot(t=14, capacity_mem=1000 * MIB, node_mem=800 * MIB, workloads=be[1:])
    actions, _ = decide(later, CFG, state2)
    assert evicted(actions) == ["k8s/b", "k8s/c"]


def test_pending_victims_still_present_are_counted_not_evicted_again() -> None:
    be = pods(("a", 5000, 100), ("b", 5000, 50), ("c", 5000, 50))
    state = MemoryEvictionState(last_round_at=0, evicted=(("k8s/a", 0.0),))
    # Still 750/1000 MiB: need 70, but a (100 MiB) is on its way out.
    snap = snapshot(t=30, capacity_mem=1000 * MIB, node_mem=750 * MIB, workloads=be)
    actions, after = decide(snap, CFG, state)
    assert evicted(actions) == []
    assert any("still terminating" in r for r in holds(actions))
    assert after.evicted == (("k8s/a", 0.0),)


def test_pending_covers_part_of_the_need() -> None:
    be = [workload("k8s/t", terminating=True, mem=40 * MIB), *pods(("b", 5000, 50), ("c", 5000, 50))]
    snap = snapshot(t=30, capacity_mem=1000 * MIB, node_mem=750 * MIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == ["k8s/b"]  # 70 − 40 pending = 30 → one 50 MiB pod
    assert actions[0].numbers["pending_bytes"] == 40 * MIB  # type: ignore[union-attr]


def test_pending_keys_from_another_policy_count() -> None:
    be = pods(("a", 5000, 100), ("b", 5000, 100))
    snap = snapshot(capacity_mem=1000 * MIB, node_mem=750 * MIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState(), pending_keys={"k8s/a"})
    assert evicted(actions) == []


def test_victims_gone_are_forgotten() -> None:
    state = MemoryEvictionState(last_round_at=0, evicted=(("k8s/a", 0.0),))
    _, after = decide(snapshot(t=1, capacity_mem=GIB, node_mem=0), CFG, state)
    assert after.evicted == ()


def test_hp_never_evicted_even_when_it_is_the_hog() -> None:
    hog = workload("k8s/hp-hog", be=False, priority=0, mem=900 * MIB)
    snap = snapshot(capacity_mem=1000 * MIB, node_mem=950 * MIB, workloads=[hog])
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == []
    assert any("no BE victim" in r for r in holds(actions))


def test_all_be_node() -> None:
    be = pods(("a", 3000, 300), ("b", 5000, 600))
    snap = snapshot(capacity_mem=1000 * MIB, node_mem=900 * MIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == ["k8s/a"]  # need 220 MiB: the lowest priority pod holds 300


def test_missing_node_metric_holds() -> None:
    snap = snapshot(capacity_mem=GIB, node_mem=None, workloads=pods(("a", 5000, 900)))
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == []
    assert any("missing node_usage.memory_working_set_bytes" in r for r in holds(actions))


def test_zero_capacity_holds() -> None:
    snap = snapshot(cpus=(), capacity_cpu=0, capacity_mem=0, node_mem=0, workloads=pods(("a", 5000, 9)))
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == []
    assert any("capacity.memory_bytes is 0" in r for r in holds(actions))


def test_stale_source_holds() -> None:
    snap = snapshot(
        capacity_mem=GIB, node_mem=GIB, workloads=pods(("a", 5000, 900)), stale={"cgroups": "read failed"}
    )
    actions, state = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == []
    assert any("stale sources: cgroups (read failed)" in r for r in holds(actions))
    assert state.last_round_at is None


def test_old_workload_sample_holds() -> None:
    be = [workload("k8s/a", mem=900 * MIB, age=30.0), workload("k8s/b", mem=900 * MIB)]
    snap = snapshot(capacity_mem=GIB, node_mem=GIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState(), failsafe=FailsafeConfig(max_sample_age_s=5))
    assert evicted(actions) == []
    assert any("older than 5 s for k8s/a" in r for r in holds(actions))


def test_workload_without_a_memory_figure_is_not_a_victim() -> None:
    be = [workload("k8s/unknown", priority=1, mem=None), workload("k8s/known", priority=2, mem=200 * MIB)]
    snap = snapshot(capacity_mem=1000 * MIB, node_mem=750 * MIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    assert evicted(actions) == ["k8s/known"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threshold_percent": 0}, "threshold_percent"),
        ({"threshold_percent": 101}, "threshold_percent"),
        ({"lower_percent": 80}, "lower_percent"),
        ({"cool_down_s": -1}, "cool_down_s"),
        ({"pending_timeout_s": 0}, "pending_timeout_s"),
        ({"enabled": "yes"}, "enabled"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"memory_eviction\.{field}\b"):
        MemoryEvictionConfig(**kwargs)  # type: ignore[arg-type]


def test_default_lower_is_threshold_minus_two() -> None:
    assert MemoryEvictionConfig().effective_lower_percent == 68
    assert MemoryEvictionConfig(threshold_percent=1).effective_lower_percent == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(3000, 7999), st.integers(0, 512)), max_size=10),
    st.integers(0, 1000),
    st.integers(0, 300),
)
def test_property_release_bounded_by_need_plus_last_victim(
    specs: list[tuple[int, int]], used_mib: int, pending_mib: int
) -> None:
    be = [workload(f"k8s/p{i}", priority=p, mem=m * MIB) for i, (p, m) in enumerate(specs)]
    be.append(workload("k8s/going", terminating=True, mem=pending_mib * MIB))
    snap = snapshot(capacity_mem=1000 * MIB, node_mem=used_mib * MIB, workloads=be)
    actions, _ = decide(snap, CFG, MemoryEvictionState())
    victims = [a for a in actions if isinstance(a, Evict)]
    released = sum(a.release_memory_bytes for a in victims)
    need = used_mib * MIB - int(1000 * MIB * 0.68) - pending_mib * MIB
    if used_mib < 700 or need <= 0:
        assert victims == []
        return
    assert "k8s/going" not in [a.key for a in victims]
    if victims:
        assert released < need + victims[-1].release_memory_bytes
        assert released - victims[-1].release_memory_bytes < need
