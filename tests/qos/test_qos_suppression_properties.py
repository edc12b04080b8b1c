"""Property tests: whatever the sequence of ticks, suppression grants BE no more than the formula allows,
never less than the floor, and never grows faster than the configured rate."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.snapshot import workload
from qos_builders import snapshot

from qos.model import BeTierState
from qos.suppression import SuppressionConfig, SuppressionState, bounds, decide, granted_milli

HP = workload("k8s/hp", be=False, priority=9000)

configs = st.builds(
    SuppressionConfig,
    policy=st.sampled_from(["cpuset", "cfsQuota"]),
    threshold_percent=st.floats(0, 100),
    min_milli_cpu=st.integers(0, 5000),
    min_cpus=st.integers(1, 4),
    max_grow_percent=st.floats(1, 100),
    dead_band_percent=st.floats(0, 5),
    psi_threshold_percent=st.one_of(st.none(), st.floats(0, 50)),
    psi_shrink_percent=st.floats(1, 50),
    cpuset_quota=st.booleans(),
)
usage = st.one_of(st.none(), st.floats(0, 20000))
tick = st.tuples(
    usage,  # HP CPU
    usage,  # system CPU
    st.one_of(st.none(), st.floats(0, 100)),  # HP PSI
    st.booleans(),  # stale
    st.one_of(st.none(), st.integers(0, 20000)),  # quota read back (someone may have rewritten it)
    st.integers(0, 16),  # size of the cpuset read back
)


@settings(max_examples=300, deadline=None)
@given(configs, st.integers(0, 16), st.one_of(st.none(), st.integers(0, 20000)), st.lists(tick, max_size=12))
def test_grant_within_formula_and_floor_growth_limited(
    cfg: SuppressionConfig,
    ncpus: int,
    capacity: int | None,
    ticks: list[tuple],  # type: ignore[type-arg]
) -> None:
    state = SuppressionState()
    for t, (hp, system, psi, stale, quota_seen, cpuset_seen) in enumerate(ticks):
        snap = snapshot(
            t=t,
            cpus=ncpus,
            capacity_cpu=capacity,
            hp_cpu=hp,
            system_cpu=system,
            workloads=[HP],
            psi=psi,
            stale={"kubelet": "old"} if stale else None,
            be_tier=BeTierState(
                cpuset=tuple(range(ncpus - min(cpuset_seen, ncpus), ncpus)), quota_milli_cpu=quota_seen
            ),
        )
        before = state.budget_milli
        _, state = decide(snap, cfg, state)
        if cfg.policy == "cpuset" and ncpus == 0:
            assert state.budget_milli is None
            continue
        if state.budget_milli is None:
            assert hp is None or system is None
            continue
        floor, _ = bounds(snap, cfg)
        granted = len(state.cpuset) * 1000 if cfg.policy == "cpuset" else state.quota_milli
        if cfg.cpuset_quota and cfg.policy == "cpuset":
            granted = granted_milli(state, cfg)
        assert granted is not None
        assert floor <= granted <= state.budget_milli
        if hp is not None and system is not None:
            formula = snap.capacity.milli_cpu * cfg.threshold_percent / 100 - hp - system
            assert granted <= max(formula, floor) + 1e-6
        if before is not None:
            grow_step = math.floor(snap.capacity.milli_cpu * cfg.max_grow_percent / 100)
            assert state.budget_milli - before <= grow_step
            if hp is None or system is None or stale:
                assert state.budget_milli <= before
