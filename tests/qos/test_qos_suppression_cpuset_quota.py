"""`cpuset_quota`: under `cpuset`, a CFS quota caps BE at the formula below its whole CPUs, lifted above."""

from __future__ import annotations

import pytest
from kit.snapshot import workload
from qos_builders import cpusets, quotas, snapshot

from qos.model import BeTierState
from qos.registry import be_cpu_grant
from qos.suppression import (
    MIN_QUOTA_MILLI_CPU,
    SuppressionConfig,
    SuppressionPolicy,
    SuppressionState,
    bounds,
    decide,
    granted_milli,
)

CQ = SuppressionConfig(cpuset_quota=True)
HP = workload("k8s/hp", be=False, priority=9000)


AS_GRANTED = -1


Tick = tuple[list[int | None], list[tuple[int, ...]], SuppressionState]


def tick(state: SuppressionState, hp: float, *, cpus: int = 2, psi: float | None = None,
         quota_seen: int | None = AS_GRANTED) -> Tick:
    """One tick whose BE knobs read back as granted, or with the quota read back as `quota_seen`."""
    quota = state.quota_milli if quota_seen == AS_GRANTED else quota_seen
    tier = BeTierState(cpuset=state.cpuset or (), quota_milli_cpu=quota)
    snap = snapshot(cpus=cpus, hp_cpu=hp, workloads=[HP], psi=psi, be_tier=tier)
    actions, after = decide(snap, CQ, state)
    return quotas(actions), cpusets(actions), after


def test_flag_is_validated_and_off_by_default() -> None:
    assert SuppressionConfig().cpuset_quota is False
    with pytest.raises(ValueError, match="cpuset_quota"):
        SuppressionConfig(cpuset_quota=1)  # type: ignore[arg-type]


def test_quota_follows_the_target_under_the_cpuset_floor() -> None:
    # 2 CPUs at 65 %: 1300 − 1000 HP = 300. Plain cpuset keeps 1 whole CPU (1000 m); the flag caps it at 300.
    q, c, state = tick(SuppressionState(), hp=1000)
    assert (q, c) == ([300], [(1,)])
    assert (state.budget_milli, state.cpuset, state.quota_milli) == (300, (1,), 300)
    assert granted_milli(state, CQ) == 300
    # HP uses a bit more: shrink at once, the quota with it, the cpuset stays.
    q, c, state = tick(state, hp=1100)
    assert (q, c, state.quota_milli) == ([200], [], 200)
    # Growth is the cfsQuota path's: 10 % of 2000 a tick, past the 1 % dead-band.
    q, _, state = tick(state, hp=600)
    assert q == [400]
    q, _, state = tick(state, hp=1290)
    assert q == [MIN_QUOTA_MILLI_CPU]  # the floor is the quota minimum, not one CPU


def test_quota_lifted_when_the_target_reaches_the_cpuset() -> None:
    state = SuppressionState(budget_milli=900, cpuset=(1,), quota_milli=900, idle_requested=True)
    q, c, state = tick(state, hp=200)  # target 1100: grow to 1100 ≥ 1 CPU
    assert (q, c) == ([None], [])
    assert (state.budget_milli, state.quota_milli) == (1100, None)
    assert granted_milli(state, CQ) == 1000  # what BE can use: its one CPU, not the budget
    # Nothing read back, nothing to lift again.
    q, c, _ = tick(state, hp=200)
    assert (q, c) == ([], [])


def test_psi_cuts_the_quota_by_the_quota_step_not_a_whole_cpu() -> None:
    state = SuppressionState(budget_milli=800, cpuset=(1,), quota_milli=800, idle_requested=True)
    q, c, state = tick(state, hp=0, psi=40.0)
    assert (q, c) == ([600], [])  # 10 % of 2000, not 1000: the quota can go below the CPU
    q, _, state = tick(state, hp=0, psi=45.0)
    assert q == [400]
    q, _, state = tick(state, hp=0, psi=20.0)  # falling: hold, no growth
    assert q == [] and state.budget_milli == 400


def test_psi_cut_below_min_cpus_keeps_the_cpus_and_sets_a_quota() -> None:
    # 4 CPUs: min_cpus 2. 2500 − 10 % of 4000 = 2100 → 2 CPUs, no quota; then 1700 < 2 CPUs → quota.
    state = SuppressionState(budget_milli=2500, cpuset=(2, 3), idle_requested=True)
    q, c, state = tick(state, hp=0, cpus=4, psi=40.0)
    assert (q, c, state.budget_milli) == ([], [], 2100)
    assert granted_milli(state, CQ) == 2000
    q, c, state = tick(state, hp=0, cpus=4, psi=50.0)
    assert (q, c) == ([1700], [])
    assert granted_milli(state, CQ) == 1700


def test_quota_reasserted_when_read_back_different() -> None:
    state = SuppressionState(budget_milli=300, cpuset=(1,), quota_milli=300, idle_requested=True)
    q, _, after = tick(state, hp=1000, quota_seen=None)
    assert q == [300]
    assert after == state
    q, _, _ = tick(state, hp=1000, quota_seen=900)
    assert q == [300]
    q, c, _ = tick(state, hp=1000)
    assert (q, c) == ([], [])


def test_stray_quota_lifted_while_the_cpuset_is_enough() -> None:
    state = SuppressionState(budget_milli=1300, cpuset=(1,), idle_requested=True)
    q, _, _ = tick(state, hp=0, quota_seen=500)
    assert q == [None]


def test_min_milli_cpu_still_buys_whole_cpus_and_floors_the_quota() -> None:
    cfg = SuppressionConfig(cpuset_quota=True, min_milli_cpu=1500)
    snap = snapshot(cpus=4, hp_cpu=4000, workloads=[HP])
    assert bounds(snap, cfg) == (1500, 4000)
    actions, state = decide(snap, cfg, SuppressionState())
    assert (quotas(actions), cpusets(actions)) == ([1500], [(2, 3)])
    assert granted_milli(state, cfg) == 1500


def test_first_tick_starts_from_the_quota_read_back() -> None:
    # A restart: the cgroup already holds 1 CPU and a 300 m quota; a target of 400 is growth from 300.
    snap = snapshot(cpus=2, hp_cpu=900, workloads=[HP], be_tier=BeTierState(cpuset=(1,), quota_milli_cpu=300))
    actions, state = decide(snap, CQ, SuppressionState())
    assert state.budget_milli == 400 and quotas(actions) == [400]
    assert "grow 300 -> 400" in actions[-1].reason  # type: ignore[union-attr]


def test_flag_off_keeps_whole_cpus_and_lifts_any_quota() -> None:
    snap = snapshot(cpus=2, hp_cpu=1000, workloads=[HP], be_tier=BeTierState(quota_milli_cpu=300))
    actions, state = decide(snap, SuppressionConfig(), SuppressionState())
    assert (quotas(actions), cpusets(actions)) == ([None], [(1,)])
    assert (state.budget_milli, state.quota_milli) == (1000, None)
    assert granted_milli(state, SuppressionConfig()) == 1000


def test_registry_reports_the_effective_grant() -> None:
    state = SuppressionState(budget_milli=1200, cpuset=(1,), idle_requested=True)

    def grant(cfg: SuppressionConfig) -> tuple[int | None, int | None, str]:
        policy = SuppressionPolicy(cfg)
        return be_cpu_grant(policy, state, snapshot(cpus=2))

    assert grant(CQ) == (1000, 20, "cpuset")
    assert grant(SuppressionConfig()) == (1200, 1000, "cpuset")  # flag off: the budget, as before
