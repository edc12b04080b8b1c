"""BE CPU eviction by satisfaction from hand-made snapshots: formula, busy, window, cool-down, pending."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.snapshot import workload
from qos_builders import evicted, holds, snapshot

from qos.actions import Action, Evict, EvictReason
from qos.cpu_eviction import CpuEvictionConfig, CpuEvictionState, be_real_limit, decide
from qos.model import BeTierState, NodeSnapshot, Workload

CFG = CpuEvictionConfig(window_s=3, cool_down_s=20)
# BE confined to 2 CPUs (limit 2000) while BE pods request 4000: sat 0.5 ≤ 0.6.
TIER = BeTierState(cpuset=(6, 7))
BE = [
    workload("k8s/free", priority=3000, request_cpu=1000, cpu=500),
    workload("k8s/batch-a", priority=5000, request_cpu=1000, cpu=700),
    workload("k8s/batch-b", priority=5000, request_cpu=2000, cpu=800),
]


def starved(t: float, workloads: list[Workload] = BE, **kw: object) -> NodeSnapshot:
    args: dict[str, object] = {"cpus": 8, "be_cpu": 1950, "be_tier": TIER, "workloads": workloads}
    args.update(kw)
    return snapshot(t=t, **args)  # type: ignore[arg-type]


def run(
    snaps: list[NodeSnapshot], cfg: CpuEvictionConfig = CFG
) -> tuple[list[list[Action]], CpuEvictionState]:
    state = CpuEvictionState()
    out = []
    for snap in snaps:
        actions, state = decide(snap, cfg, state)
        out.append(actions)
    return out, state


def test_real_limit_is_min_of_cpuset_quota_and_capacity() -> None:
    assert be_real_limit(snapshot(cpus=8, be_tier=BeTierState(cpuset=(6, 7)))) == 2000
    assert be_real_limit(snapshot(cpus=8, be_tier=BeTierState(cpuset=(6, 7), quota_milli_cpu=500))) == 500
    assert be_real_limit(snapshot(cpus=8)) == 8000
    assert be_real_limit(snapshot(cpus=(), capacity_cpu=0)) == 0


def test_release_request_times_upper_minus_sat() -> None:
    ticks, state = run([starved(t) for t in (0, 1, 2)])
    assert ticks[:2] == [[], []]  # two 1 s samples do not cover the 3 s window yet
    actions = ticks[2]
    # need = 4000 × (0.8 − 0.5) = 1200: free (1000) then the busier batch pod of the same priority.
    assert evicted(actions) == ["k8s/free", "k8s/batch-b"]
    first = actions[0]
    assert isinstance(first, Evict)
    assert first.reason is EvictReason.CPU_SATISFACTION
    assert first.numbers["need_milli_cpu"] == 1200
    assert first.numbers["satisfaction"] == pytest.approx(0.5)
    assert first.release_milli_cpu == 1000
    assert state.samples == ()  # new evidence needed after a round
    assert state.last_round_at == 2


def test_not_busy_no_eviction() -> None:
    ticks, _ = run([starved(t, be_cpu=1700) for t in range(6)])  # 85 % of the 2000 limit
    assert all(evicted(a) == [] for a in ticks)


def test_satisfaction_above_lower_no_eviction() -> None:
    tier = BeTierState(cpuset=(5, 6, 7))  # sat 3000/4000 = 0.75 > 0.6
    ticks, _ = run([starved(t, be_tier=tier, be_cpu=2900) for t in range(6)])
    assert all(a == [] for a in ticks)


def test_one_good_sample_in_the_window_resets_the_evidence() -> None:
    snaps = [starved(0), starved(1), starved(2, be_cpu=100), starved(3), starved(4), starved(5)]
    ticks, _ = run(snaps)
    assert [evicted(a) for a in ticks[:5]] == [[], [], [], [], []]
    assert evicted(ticks[5]) != []  # samples 3..5 are all starved only once sample 2 left the window


def test_window_needs_enough_samples() -> None:
    # Two samples 3 s apart span the window but are too few (need window/3 s of samples).
    cfg = CpuEvictionConfig(window_s=9)
    ticks, _ = run([starved(0), starved(9)], cfg)
    assert ticks == [[], []]


def test_cool_down_holds_visibly() -> None:
    ticks, state = run([starved(t) for t in range(3)])
    assert evicted(ticks[2]) != []
    # The victims are gone, new BE pods starve again: the 20 s cool-down holds the next round, visibly.
    again = [BE[1], workload("k8s/new", request_cpu=3000, cpu=1000)]
    for t in range(10, 13):
        actions, state = decide(starved(t, workloads=again), CFG, state)
    assert evicted(actions) == []
    assert any("cool-down, 10.0 s left" in r for r in holds(actions))
    for t in range(22, 25):
        actions, state = decide(starved(t, workloads=again), CFG, state)
        if evicted(actions):
            break
    assert evicted(actions) == ["k8s/new"]


def test_terminating_request_is_pending_not_counted() -> None:
    # batch-b (2000) is terminating: request 2000, sat 1.0 — nothing to do.
    be = [*BE[:2], workload("k8s/batch-b", request_cpu=2000, terminating=True)]
    ticks, _ = run([starved(t, workloads=be) for t in range(5)])
    assert all(a == [] for a in ticks)


def test_remembered_victims_are_not_evicted_twice() -> None:
    ticks, state = run([starved(t) for t in range(3)])
    assert evicted(ticks[2]) == ["k8s/free", "k8s/batch-b"]
    # The victims are still listed (not yet terminating) after the cool-down: they are pending.
    for t in range(30, 35):
        actions, state = decide(starved(t), CFG, state)
        assert evicted(actions) == []


def test_pending_keys_from_another_policy() -> None:
    state = CpuEvictionState()
    for t in range(4):
        actions, state = decide(starved(t), CFG, state, pending_keys={"k8s/batch-b"})
    # Without batch-b: request 2000, sat 1.0 — no eviction at all.
    assert evicted(actions) == []


def test_stale_data_holds_and_is_not_evidence() -> None:
    ticks, state = run([starved(0), starved(1, stale={"kubelet": "timeout"})])
    assert evicted(ticks[1]) == []
    assert any("unsafe" in r and "kubelet" in r for r in holds(ticks[1]))
    assert [s.at for s in state.samples] == [0]


def test_old_workload_sample_holds() -> None:
    be = [*BE[:2], workload("k8s/batch-b", request_cpu=2000, age=60.0)]
    ticks, _ = run([starved(t, workloads=be) for t in range(5)])
    assert all(evicted(a) == [] for a in ticks)
    assert any("older than" in r for r in holds(ticks[-1]))


def test_missing_be_usage_holds() -> None:
    ticks, _ = run([starved(t, be_cpu=None) for t in range(5)])
    assert all(evicted(a) == [] for a in ticks)
    assert any("missing be_usage" in r for r in holds(ticks[0]))


def test_no_be_no_action() -> None:
    hp = workload("k8s/hp", be=False, priority=9000, request_cpu=8000, cpu=8000)
    ticks, _ = run([starved(t, workloads=[hp], be_cpu=0.0) for t in range(5)])
    assert ticks == [[]] * 5


def test_hp_never_evicted() -> None:
    hp = workload("k8s/hp", be=False, priority=0, request_cpu=4000, cpu=4000)
    be = [workload("k8s/be", request_cpu=4000, cpu=1950)]
    ticks, _ = run([starved(t, workloads=[hp, *be]) for t in range(3)])
    assert evicted(ticks[2]) == ["k8s/be"]


def test_zero_capacity_no_exception() -> None:
    ticks, _ = run([snapshot(t=t, cpus=(), capacity_cpu=0, be_cpu=0.0, workloads=BE) for t in range(5)])
    # limit 0 (< one CPU) counts as busy, sat 0: BE requests cannot be met at all — evict.
    assert evicted(ticks[2]) != []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"satisfaction_lower_percent": 0}, "satisfaction_lower_percent"),
        ({"satisfaction_upper_percent": 101}, "satisfaction_upper_percent"),
        ({"satisfaction_lower_percent": 70, "satisfaction_upper_percent": 60}, "satisfaction_upper_percent"),
        ({"be_usage_threshold_percent": 120}, "be_usage_threshold_percent"),
        ({"window_s": 0}, "window_s"),
        ({"cool_down_s": float("inf")}, "cool_down_s"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"cpu_eviction\.{field}\b"):
        CpuEvictionConfig(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(3000, 7999), st.integers(0, 4000)), min_size=1, max_size=8),
    st.integers(1, 8),
)
def test_property_release_bounded_by_need_plus_last_victim(
    specs: list[tuple[int, int]], be_cpus: int
) -> None:
    be = [workload(f"k8s/p{i}", priority=p, request_cpu=r) for i, (p, r) in enumerate(specs)]
    tier = BeTierState(cpuset=tuple(range(8 - be_cpus, 8)))
    ticks, _ = run([starved(t, workloads=be, be_tier=tier, be_cpu=be_cpus * 1000.0) for t in range(4)])
    victims = [a for actions in ticks for a in actions if isinstance(a, Evict)]
    request = sum(r for _, r in specs)
    sat = be_cpus * 1000 / request if request else float("inf")
    if sat > 0.6:
        assert victims == []
        return
    need = -(-request * (0.8 - sat) // 1)
    released = sum(a.release_milli_cpu for a in victims)
    assert released >= need
    assert released - victims[-1].release_milli_cpu < need
