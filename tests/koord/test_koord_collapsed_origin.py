"""The collapsed origin beside koord-manager (issue 13): with no NodeMetric from this agent, koord-manager
resets batch resources and writes `originExtendedAllocatable` as 0. Pure policy tests on hand-built
snapshots: such an origin is stale data, never a reason to evict; a sharp drop waits for confirmation."""

from __future__ import annotations

import dataclasses
import json

import pytest
from kit.snapshot import evicted_keys, k8s_workload, node_snapshot, yarn_workload

from qos.actions import Hold
from qos.batch import BatchConfig, BatchPolicy, BatchState, decide_batch
from qos.model import NodeSnapshot, Resources, Usage, Workload

GIB = 1 << 30
TS = 1700000000000
ZERO = json.dumps({"resources": {"kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"}})
ORIGIN_8 = json.dumps(
    {"resources": {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": "64Gi"}}
)
ORIGIN_3 = json.dumps(
    {"resources": {"kubernetes.io/batch-cpu": "3000", "kubernetes.io/batch-memory": "64Gi"}}
)
CFG = BatchConfig(origin="annotation", evict=True)


def _pod(name: str, prio: int, cores: int, started: float) -> Workload:
    return k8s_workload(name, prio, cores, started, namespace="batch")


# 6 cores of batch pods and 5 of YARN: under an origin of 8 cores 3 are over; under 0, everything is.
WORKLOADS = (
    _pod("free-pod", 3500, 1, 100),
    _pod("batch-a", 5500, 2, 110),
    _pod("batch-b", 5500, 3, 120),
    yarn_workload(1, 1, 200),
    yarn_workload(2, 2, 210),
    yarn_workload(3, 2, 220),
)


def _snap(at: float, annotation: str | None, report_age: float | None) -> NodeSnapshot:
    return node_snapshot(WORKLOADS, taken_at=at, system=Usage(1000.0, 2 * GIB), origin_annotation=annotation,
                         usage_report_age_s=report_age)


def test_the_old_behaviour_a_zero_origin_evicts_everything_when_taken_at_its_word() -> None:
    """The reproduction: confirmation off and a fresh report make the zero origin count, and then every
    batch pod and YARN container is chosen. This is what happened with no report at all before."""
    cfg = dataclasses.replace(CFG, origin_confirm_s=0)
    actions, _ = decide_batch(_snap(1000, ZERO, report_age=5.0), cfg, BatchState())
    assert sorted(evicted_keys(actions)) == sorted(w.key for w in WORKLOADS)


@pytest.mark.parametrize("report_age", [None, 181.0, 3600.0])
@pytest.mark.parametrize("annotation", [ZERO, None])
def test_zero_or_missing_origin_without_a_fresh_report_holds(
    report_age: float | None, annotation: str | None
) -> None:
    policy = BatchPolicy(CFG)
    state = policy.initial_state()
    for t in range(0, 600, 10):  # ten minutes of it: never an eviction
        actions, state = policy.decide(_snap(1000 + t, annotation, report_age), state)
        assert evicted_keys(actions) == []
        holds = [a for a in actions if isinstance(a, Hold)]
        assert len(holds) == 1
        if annotation is None:  # never an origin at all
            assert holds[0].reason == "origin unknown"
        else:
            assert "origin held" in holds[0].reason
            assert ("no usage report" if report_age is None else "old") in holds[0].reason


def test_an_origin_annotation_that_disappears_without_a_fresh_report_holds() -> None:
    policy = BatchPolicy(CFG)
    _, state = policy.decide(_snap(1000, ORIGIN_8, report_age=10.0), policy.initial_state())
    actions, state = policy.decide(_snap(1001, None, report_age=500.0), state)
    assert evicted_keys(actions) == [] and "annotation gone" in actions[0].reason  # type: ignore[attr-defined]
    actions, _ = policy.decide(_snap(1002, None, report_age=10.0), state)
    # with a fresh report the last origin read stays in force, as before: the ledger acts again
    assert not any("origin held" in getattr(a, "reason", "") for a in actions)
    assert any("pending releases" in getattr(a, "reason", "") for a in actions) or evicted_keys(actions)


def test_collapse_after_a_good_origin_holds_even_with_the_old_origin_in_memory() -> None:
    policy = BatchPolicy(CFG)
    actions, state = policy.decide(_snap(1000, ORIGIN_8, report_age=None), policy.initial_state())
    assert len(evicted_keys(actions)) >= 1, "a real overcommit against a real origin is released"
    actions, state = policy.decide(_snap(1001, ZERO, report_age=None), state)
    assert evicted_keys(actions) == [] and "collapsed to 0" in actions[0].reason  # type: ignore[attr-defined]
    assert state.origin == Resources(8000, 64 * GIB), "the last real origin is what the ledger keeps"


def test_a_zero_origin_with_a_fresh_report_is_confirmed_before_it_counts() -> None:
    cfg = dataclasses.replace(CFG, origin_confirm_s=120)
    policy = BatchPolicy(cfg)
    state = policy.initial_state()
    for t in (0, 60, 119):
        actions, state = policy.decide(_snap(1000 + t, ZERO, report_age=10.0), state)
        assert evicted_keys(actions) == [] and "confirming" in actions[0].reason  # type: ignore[attr-defined]
    actions, state = policy.decide(_snap(1120, ZERO, report_age=10.0), state)
    assert len(evicted_keys(actions)) == len(WORKLOADS), "a zero that lasted, with our report fresh, is real"


def test_a_report_going_stale_restarts_the_confirmation() -> None:
    policy = BatchPolicy(dataclasses.replace(CFG, origin_confirm_s=120))
    state = policy.initial_state()
    _, state = policy.decide(_snap(1000, ZERO, report_age=10.0), state)
    _, state = policy.decide(_snap(1100, ZERO, report_age=400.0), state)  # stale: held, timer reset
    actions, state = policy.decide(_snap(1130, ZERO, report_age=10.0), state)
    assert evicted_keys(actions) == []
    actions, _ = policy.decide(_snap(1250, ZERO, report_age=10.0), state)
    assert evicted_keys(actions)


def test_a_sharp_drop_keeps_the_origin_in_force_until_confirmed() -> None:
    """8 → 3 cores is a drop of 62 % > 50 %: for the confirmation interval the 8-core origin stays in
    force (nothing over it), then 3 cores count and 8 of 11 requested cores are over."""
    policy = BatchPolicy(dataclasses.replace(CFG, origin_confirm_s=60))
    relaxed = [w for w in WORKLOADS if w.key != "k8s/batch-b"]  # 8 cores: fits 8 exactly
    base = _snap(1000, ORIGIN_8, 10.0)
    actions, state = policy.decide(
        dataclasses.replace(base, workloads=tuple(relaxed)), policy.initial_state()
    )
    assert actions == []
    for t in (1, 30, 59):
        s = dataclasses.replace(_snap(1000 + t, ORIGIN_3, 10.0), workloads=tuple(relaxed))
        actions, state = policy.decide(s, state)
        assert evicted_keys(actions) == [] and "dropped" in actions[0].reason  # type: ignore[attr-defined]
        assert state.origin == Resources(8000, 64 * GIB)
    s = dataclasses.replace(_snap(1061, ORIGIN_3, 10.0), workloads=tuple(relaxed))
    actions, state = policy.decide(s, state)
    assert evicted_keys(actions) and state.origin == Resources(3000, 64 * GIB)


def test_a_small_drop_counts_at_once() -> None:
    policy = BatchPolicy(CFG)
    _, state = policy.decide(_snap(1000, ORIGIN_8, 10.0), policy.initial_state())
    seven = json.dumps(
        {"resources": {"kubernetes.io/batch-cpu": "7000", "kubernetes.io/batch-memory": "64Gi"}}
    )
    _, state = policy.decide(_snap(1001, seven, 10.0), state)
    assert state.origin == Resources(7000, 64 * GIB) and state.suspect_since is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("origin_drop_fraction", 0.0),
        ("origin_drop_fraction", 1.5),
        ("origin_confirm_s", -1),
        ("origin_report_max_age_s", 0),
    ],
)
def test_bad_settings_are_named(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"batch.{field}"):
        BatchConfig(**{field: value})  # type: ignore[arg-type]
