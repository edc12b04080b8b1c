"""BE CPU suppression from hand-made snapshots: formula, floor, rates, dead-band, PSI, re-assert, edges."""

from __future__ import annotations

import pytest
from kit.snapshot import workload
from qos_builders import cpusets, holds, idles, quotas, snapshot

from qos.model import BeTierState
from qos.suppression import (
    MIN_QUOTA_MILLI_CPU,
    SuppressionConfig,
    SuppressionState,
    decide,
    effective_min_cpus,
)

QUOTA = SuppressionConfig(policy="cfsQuota")
HP = workload("k8s/hp", be=False, priority=9000)


def test_formula_capacity_times_threshold_minus_hp_minus_system() -> None:
    # 4000 × 65 % − 1000 − 200 = 1400, from an unlimited BE tier: shrink at once.
    snap = snapshot(cpus=4, hp_cpu=1000, system_cpu=200, workloads=[HP])
    actions, state = decide(snap, QUOTA, SuppressionState())
    assert quotas(actions) == [1400]
    assert state.budget_milli == 1400
    numbers = actions[-1].numbers  # type: ignore[union-attr]
    assert numbers["formula_milli_cpu"] == pytest.approx(1400)
    assert numbers["hp_used_milli_cpu"] == 1000
    assert numbers["system_used_milli_cpu"] == 200


def test_threshold_is_configurable() -> None:
    snap = snapshot(cpus=4, hp_cpu=0, system_cpu=0)
    actions, _ = decide(snap, SuppressionConfig(policy="cfsQuota", threshold_percent=50), SuppressionState())
    assert quotas(actions) == [2000]


def test_cpuset_whole_cpus_taken_from_the_end_rounded_down() -> None:
    # 8000 × 65 % = 5200 → 5 whole CPUs (never 6: that would exceed the formula), the last five.
    actions, state = decide(snapshot(cpus=8), SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == [(3, 4, 5, 6, 7)]
    assert state.cpuset == (3, 4, 5, 6, 7)
    assert state.budget_milli == 5200


def test_cpuset_follows_listed_order_so_siblings_listed_together_go_together() -> None:
    # A source listing siblings side by side (0,4 1,5 2,6 3,7): the last two entries are one core.
    snap = snapshot(cpus=(0, 4, 1, 5, 2, 6, 3, 7), hp_cpu=3000)
    actions, _ = decide(snap, SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == [(3, 7)]  # 5200 − 3000 = 2200 → 2 CPUs: the core (3, 7), sorted


def test_cpuset_minimum_two_cpus() -> None:
    snap = snapshot(cpus=8, hp_cpu=8000, workloads=[HP])
    actions, state = decide(snap, SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == [(6, 7)]
    assert state.budget_milli == 2000


def test_cpuset_minimum_one_cpu_on_two_cpu_node() -> None:
    snap = snapshot(cpus=2, hp_cpu=2000, workloads=[HP])
    actions, _ = decide(snap, SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == [(1,)]
    assert effective_min_cpus(SuppressionConfig(), 2) == 1
    assert effective_min_cpus(SuppressionConfig(), 1) == 1
    assert effective_min_cpus(SuppressionConfig(min_cpus=3), 8) == 3


def test_configured_minimum_milli_cpu_is_the_floor() -> None:
    snap = snapshot(cpus=4, hp_cpu=4000, workloads=[HP])
    actions, _ = decide(snap, SuppressionConfig(policy="cfsQuota", min_milli_cpu=500), SuppressionState())
    assert quotas(actions) == [500]


def test_cfs_quota_minimum_is_2ms_per_100ms() -> None:
    snap = snapshot(cpus=4, hp_cpu=4000, system_cpu=500, workloads=[HP])
    actions, state = decide(snap, QUOTA, SuppressionState())
    assert quotas(actions) == [MIN_QUOTA_MILLI_CPU] == [20]
    assert state.quota_milli == 20


def test_shrink_at_once() -> None:
    state = SuppressionState(budget_milli=2600, quota_milli=2600)
    snap = snapshot(cpus=4, hp_cpu=2100, workloads=[HP], be_tier=BeTierState(quota_milli_cpu=2600))
    actions, state = decide(snap, QUOTA, state)
    assert quotas(actions) == [500]
    assert state.budget_milli == 500


def test_grow_at_most_ten_percent_of_capacity_per_tick() -> None:
    state = SuppressionState(budget_milli=500, quota_milli=500)
    seen = []
    for tick in range(7):
        snap = snapshot(t=tick, cpus=4, be_tier=BeTierState(quota_milli_cpu=state.quota_milli))
        actions, state = decide(snap, QUOTA, state)
        seen.append(quotas(actions))
    # Target 2600; 10 % of 4000 = 400 per tick.
    assert seen == [[900], [1300], [1700], [2100], [2500], [2600], []]


def test_cpuset_grows_through_the_budget_not_in_whole_cpu_jumps() -> None:
    # 2-CPU node, target 1300 → 1 CPU; from 1 CPU the budget ramps 200 a tick but stays under 2 CPUs.
    state = SuppressionState(budget_milli=1000, cpuset=(1,))
    for tick in range(5):
        actions, state = decide(
            snapshot(t=tick, cpus=2, be_tier=BeTierState(cpuset=(1,))), SuppressionConfig(), state
        )
        assert cpusets(actions) == []
    assert state.budget_milli == 1300


def test_dead_band_holds_small_growth_but_never_delays_a_cut() -> None:
    state = SuppressionState(budget_milli=2560, quota_milli=2560)
    tier = BeTierState(quota_milli_cpu=2560)
    # Target 2600 is 40 above; the dead-band is 1 % of 4000 = 40: grow.
    actions, _ = decide(snapshot(cpus=4, be_tier=tier), QUOTA, state)
    assert quotas(actions) == [2600]
    # Target 2590 is 30 above: inside the dead-band, nothing written.
    actions, after = decide(snapshot(cpus=4, hp_cpu=10, workloads=[HP], be_tier=tier), QUOTA, state)
    assert quotas(actions) == []
    assert after.budget_milli == 2560
    # Target 2550 is 10 below: cut, HP first.
    actions, after = decide(snapshot(cpus=4, hp_cpu=50, workloads=[HP], be_tier=tier), QUOTA, state)
    assert quotas(actions) == [2550]


def test_reassert_after_external_rewrite_without_reramp() -> None:
    state = SuppressionState(budget_milli=2600, quota_milli=2600, idle_requested=True)
    # systemd reset the quota to unlimited: back to what we granted, at once.
    actions, after = decide(snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=None)), QUOTA, state)
    assert quotas(actions) == [2600]
    assert "re-assert" in actions[0].reason  # type: ignore[union-attr]
    assert after.budget_milli == 2600
    # Someone wrote a tiny quota: we do not ramp up from it at 10 % a tick, we restore the grant.
    actions, after = decide(snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=100)), QUOTA, state)
    assert quotas(actions) == [2600]
    # Read back as granted: nothing to do.
    actions, _ = decide(snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=2600)), QUOTA, state)
    assert actions == []


def test_reassert_cpuset_rewritten_to_all_cpus() -> None:
    state = SuppressionState(budget_milli=5200, cpuset=(3, 4, 5, 6, 7), idle_requested=True)
    actions, after = decide(
        snapshot(cpus=8, be_tier=BeTierState(cpuset=tuple(range(8)))), SuppressionConfig(), state
    )
    assert cpusets(actions) == [(3, 4, 5, 6, 7)]
    assert after == state


def test_psi_cuts_one_step_while_not_falling_and_blocks_growth() -> None:
    cfg = SuppressionConfig(policy="cfsQuota", psi_threshold_percent=10)
    state = SuppressionState(budget_milli=2000, quota_milli=2000, idle_requested=True)

    def tick(t: float, psi: float) -> list[int | None]:
        nonlocal state
        snap = snapshot(t=t, cpus=4, be_tier=BeTierState(quota_milli_cpu=state.quota_milli), psi=psi)
        actions, state = decide(snap, cfg, state)
        return quotas(actions)

    # Usage says BE may grow to 2600, but HP waits for CPU 20 % of the time: cut 10 % of 4000 at once.
    assert tick(1, 20.0) == [1600]
    # Pressure still rising: another step.
    assert tick(2, 25.0) == [1200]
    # Pressure falling but still high: hold, no growth.
    assert tick(3, 15.0) == []
    assert state.budget_milli == 1200
    # Pressure gone: growth resumes at the limited rate.
    assert tick(4, 2.0) == [1600]


def test_psi_high_blocks_growth_visibly() -> None:
    cfg = SuppressionConfig(policy="cfsQuota", psi_threshold_percent=10)
    state = SuppressionState(budget_milli=1200, quota_milli=1200, idle_requested=True, last_hp_psi=30.0)
    actions, _ = decide(snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=1200), psi=15.0), cfg, state)
    assert quotas(actions) == []
    assert any("pressure 15.0%" in r for r in holds(actions))


def test_psi_cut_under_cpuset_takes_at_least_one_cpu() -> None:
    state = SuppressionState(budget_milli=5200, cpuset=(3, 4, 5, 6, 7), idle_requested=True)
    actions, state = decide(snapshot(cpus=8, psi=50.0), SuppressionConfig(), state)
    assert cpusets(actions) == [(4, 5, 6, 7)]


def test_psi_never_cuts_below_the_floor() -> None:
    state = SuppressionState(budget_milli=20, quota_milli=20, idle_requested=True)
    actions, state = decide(snapshot(cpus=4, psi=90.0, be_tier=BeTierState(quota_milli_cpu=20)), QUOTA, state)
    assert quotas(actions) == []
    assert state.budget_milli == 20


def test_missing_hp_usage_holds_the_budget() -> None:
    state = SuppressionState(budget_milli=1000, quota_milli=1000, idle_requested=True)
    snap = snapshot(cpus=4, hp_cpu=None, workloads=[HP], be_tier=BeTierState(quota_milli_cpu=1000))
    actions, after = decide(snap, QUOTA, state)
    assert quotas(actions) == []
    assert any("missing" in r for r in holds(actions))
    assert after.budget_milli == 1000


def test_missing_system_usage_on_first_tick_writes_nothing() -> None:
    actions, after = decide(snapshot(cpus=4, system_cpu=None), SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == [] and quotas(actions) == []
    assert idles(actions) == [True]  # cpu.idle does not depend on any figure
    assert after.budget_milli is None


def test_missing_usage_with_psi_still_cuts() -> None:
    state = SuppressionState(budget_milli=2000, quota_milli=2000, idle_requested=True)
    snap = snapshot(cpus=4, hp_cpu=None, workloads=[HP], psi=40.0, be_tier=BeTierState(quota_milli_cpu=2000))
    actions, _ = decide(snap, QUOTA, state)
    assert quotas(actions) == [1600]


def test_stale_data_may_cut_but_not_grow() -> None:
    state = SuppressionState(budget_milli=1000, quota_milli=1000, idle_requested=True)
    tier = BeTierState(quota_milli_cpu=1000)
    actions, after = decide(
        snapshot(cpus=4, stale={"kubelet": "no answer for 30 s"}, be_tier=tier), QUOTA, state
    )
    assert quotas(actions) == []
    assert any("stale" in r for r in holds(actions))
    assert after.budget_milli == 1000
    busy = snapshot(cpus=4, hp_cpu=2000, workloads=[HP], stale={"kubelet": "old"}, be_tier=tier)
    actions, _ = decide(busy, QUOTA, state)
    assert quotas(actions) == [600]


def test_all_be_node_counts_missing_hp_usage_as_zero() -> None:
    be = workload("k8s/be", cpu=3000)
    actions, _ = decide(snapshot(cpus=4, hp_cpu=None, workloads=[be]), QUOTA, SuppressionState())
    assert quotas(actions) == [2600]


def test_zero_capacity_cpuset_holds_and_quota_goes_to_minimum() -> None:
    snap = snapshot(cpus=(), capacity_cpu=0, capacity_mem=0, node_mem=None)
    actions, _ = decide(snap, SuppressionConfig(), SuppressionState())
    assert cpusets(actions) == []
    assert any("no CPUs" in r for r in holds(actions))
    actions, state = decide(snap, QUOTA, SuppressionState())
    assert quotas(actions) == [20]
    again = snapshot(t=2000, cpus=(), capacity_cpu=0, be_tier=BeTierState(quota_milli_cpu=20))
    actions, _ = decide(again, QUOTA, state)
    assert quotas(actions) == []


def test_cpu_idle_once_and_again_when_read_back_off() -> None:
    actions, state = decide(snapshot(), SuppressionConfig(), SuppressionState())
    assert idles(actions) == [True]
    actions, state = decide(
        snapshot(be_tier=BeTierState(cpuset=(1, 2), cpu_idle=None)), SuppressionConfig(), state
    )
    assert idles(actions) == []  # the kernel may not have cpu.idle: asked once is enough
    actions, _ = decide(
        snapshot(be_tier=BeTierState(cpuset=(1, 2), cpu_idle=False)), SuppressionConfig(), state
    )
    assert idles(actions) == [True]
    actions, _ = decide(snapshot(), SuppressionConfig(cpu_idle=False), SuppressionState())
    assert idles(actions) == []


def test_cpuset_policy_lifts_a_quota_and_quota_policy_restores_the_cpuset() -> None:
    actions, _ = decide(
        snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=500)), SuppressionConfig(), SuppressionState()
    )
    assert quotas(actions) == [None]
    actions, _ = decide(snapshot(cpus=4, be_tier=BeTierState(cpuset=(2, 3))), QUOTA, SuppressionState())
    assert cpusets(actions) == [(0, 1, 2, 3)]


def test_first_tick_starts_from_the_knob_read_back() -> None:
    # BE already confined to 1000: the target 2600 is reached by growing, not by jumping.
    actions, state = decide(
        snapshot(cpus=4, be_tier=BeTierState(quota_milli_cpu=1000)), QUOTA, SuppressionState()
    )
    assert quotas(actions) == [1400]
    assert state.budget_milli == 1400


def test_disabled_does_nothing() -> None:
    actions, state = decide(snapshot(), SuppressionConfig(enabled=False), SuppressionState())
    assert actions == [] and state == SuppressionState()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threshold_percent": 150}, "threshold_percent"),
        ({"threshold_percent": "65"}, "threshold_percent"),
        ({"policy": "quota"}, "policy"),
        ({"min_cpus": 0}, "min_cpus"),
        ({"min_milli_cpu": -1}, "min_milli_cpu"),
        ({"max_grow_percent": 0}, "max_grow_percent"),
        ({"dead_band_percent": float("nan")}, "dead_band_percent"),
        ({"psi_threshold_percent": -1}, "psi_threshold_percent"),
        ({"cpu_idle": 1}, "cpu_idle"),
        ({"min_cpus": True}, "min_cpus"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"suppression\.{field}\b"):
        SuppressionConfig(**kwargs)  # type: ignore[arg-type]
