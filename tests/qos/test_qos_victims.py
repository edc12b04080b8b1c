"""Victim order and picking: BE only, priority, usage, YARN AM last and newest first, just enough."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.snapshot import MIB, workload
from kit.snapshot import yarn_container as yarn
from qos_builders import snapshot

from qos.model import Resources, Workload
from qos.victims import order_victims, pending, pick_victims, prune_evicted, remember


def keys(ws: list[Workload]) -> list[str]:
    return [w.key for w in ws]


def test_priority_ascending_first() -> None:
    ws = [
        workload("k8s/mid", priority=7000, mem=10 * MIB),
        workload("k8s/free", priority=3000, mem=1 * MIB),
        workload("k8s/batch", priority=5000, mem=99 * MIB),
    ]
    assert keys(order_victims(ws)) == ["k8s/free", "k8s/batch", "k8s/mid"]


def test_usage_descending_within_a_priority() -> None:
    ws = [
        workload("k8s/small", mem=10 * MIB, cpu=900),
        workload("k8s/big", mem=50 * MIB, cpu=100),
        workload("k8s/medium", mem=30 * MIB, cpu=500),
    ]
    assert keys(order_victims(ws, by_memory=True)) == ["k8s/big", "k8s/medium", "k8s/small"]
    assert keys(order_victims(ws, by_memory=False)) == ["k8s/small", "k8s/medium", "k8s/big"]


def test_hp_and_terminating_are_never_candidates() -> None:
    ws = [
        workload("k8s/hp", be=False, priority=0, mem=900 * MIB, request_cpu=4000),
        workload("k8s/going", terminating=True, mem=800 * MIB),
        workload("k8s/be", mem=1 * MIB, request_cpu=100),
    ]
    assert keys(order_victims(ws)) == ["k8s/be"]
    chosen, got = pick_victims(ws, 10_000, 10 * 1024 * MIB)
    assert keys(chosen) == ["k8s/be"]
    assert got == Resources(100, 1 * MIB)


def test_yarn_newest_first_am_last() -> None:
    # The AM is the biggest and the oldest; usage order alone would take it first.
    ws = [
        yarn(1, 1, mem=500 * MIB, started_at=100),
        yarn(1, 2, mem=10 * MIB, started_at=200),
        yarn(1, 3, mem=20 * MIB, started_at=300),
    ]
    order = keys(order_victims(ws))
    assert order == [ws[2].key, ws[1].key, ws[0].key]


def test_yarn_am_only_when_no_other_container_of_its_app_remains() -> None:
    am, c2, c3 = (
        yarn(1, 1, mem=500 * MIB),
        yarn(1, 2, mem=10 * MIB, started_at=2),
        yarn(1, 3, mem=0, started_at=3),
    )
    # c3 releases no memory, so it is passed over and stays: the AM must stay too.
    chosen, got = pick_victims([am, c2, c3], 0, 400 * MIB)
    assert keys(chosen) == [c2.key]
    assert got.memory_bytes == 10 * MIB
    # Once every other container is taken, the AM may go.
    chosen, _ = pick_victims([am, c2], 0, 400 * MIB)
    assert keys(chosen) == [c2.key, am.key]
    # An AM alone (its containers are gone) is an ordinary candidate.
    chosen, _ = pick_victims([am], 0, 1)
    assert keys(chosen) == [am.key]


def test_yarn_apps_keep_their_place_in_the_global_order() -> None:
    k8s = workload("k8s/pod", mem=300 * MIB, started_at=1)
    ws = [yarn(1, 1, mem=400 * MIB), yarn(1, 2, mem=100 * MIB, started_at=5), k8s]
    # Global order by usage: am(400), pod(300), c2(100); the app's two places go to c2 then the AM.
    assert keys(order_victims(ws)) == [ws[1].key, k8s.key, ws[0].key]


def test_stops_as_soon_as_the_need_is_met() -> None:
    ws = [workload(f"k8s/p{i}", mem=(10 - i) * 100 * MIB) for i in range(5)]
    chosen, got = pick_victims(ws, 0, 1500 * MIB)
    assert keys(chosen) == ["k8s/p0", "k8s/p1"]
    assert got.memory_bytes == 1900 * MIB


def test_no_need_no_victim() -> None:
    assert pick_victims([workload("k8s/a", mem=MIB, request_cpu=10)], 0, 0) == ([], Resources())


def test_cpu_need_skips_workloads_without_a_request() -> None:
    ws = [workload("k8s/norequest", priority=1, cpu=3000), workload("k8s/req", priority=2, request_cpu=500)]
    chosen, got = pick_victims(ws, 400, 0)
    assert keys(chosen) == ["k8s/req"]
    assert got.milli_cpu == 500


def test_combined_need_takes_until_both_are_met() -> None:
    ws = [
        workload("k8s/a", priority=1, request_cpu=1000, mem=0),
        workload("k8s/b", priority=2, request_cpu=0, mem=100 * MIB),
        workload("k8s/c", priority=3, request_cpu=500, mem=100 * MIB),
    ]
    chosen, got = pick_victims(ws, 1000, 150 * MIB)
    assert keys(chosen) == ["k8s/a", "k8s/b", "k8s/c"]
    assert got == Resources(1500, 200 * MIB)


def test_pending_counts_terminating_and_remembered_victims_still_present() -> None:
    ws = [
        workload("k8s/term", terminating=True, mem=10 * MIB),
        workload("k8s/remembered", mem=20 * MIB),
        workload("k8s/other", mem=40 * MIB),
        workload("k8s/hp-term", be=False, terminating=True, mem=80 * MIB),
    ]
    snap = snapshot(t=100, workloads=ws)
    log = remember((), ["k8s/remembered", "k8s/gone"], 90)
    log = prune_evicted(snap, log, timeout_s=60)
    assert log == (("k8s/remembered", 90),)
    p = pending(snap, log)
    assert p.keys == {"k8s/term", "k8s/remembered"}
    assert p.release.memory_bytes == 30 * MIB
    # Too long without terminating: no longer counted, eligible again.
    assert prune_evicted(snapshot(t=200, workloads=ws), log, timeout_s=60) == ()


candidate = st.builds(
    workload,
    st.text("abcdefgh", min_size=1, max_size=6).map(lambda s: "k8s/" + s),
    be=st.booleans(),
    priority=st.sampled_from([3000, 5000, 5500, 7000, 9000]),
    cpu=st.one_of(st.none(), st.floats(0, 4000)),
    mem=st.one_of(st.none(), st.integers(0, 4 << 30)),
    request_cpu=st.integers(0, 4000),
    terminating=st.booleans(),
    started_at=st.floats(0, 1e6),
)
yarn_container = st.builds(
    yarn,
    st.integers(1, 3),
    st.integers(1, 5),
    mem=st.integers(0, 1 << 30),
    request_cpu=st.integers(0, 4000),
    started_at=st.floats(0, 1e6),
)
pool = st.lists(st.one_of(candidate, yarn_container), max_size=12, unique_by=lambda w: w.key)


@settings(max_examples=300, deadline=None)
@given(pool, st.integers(0, 8000), st.integers(0, 8 << 30))
def test_property_never_far_more_than_asked(ws: list[Workload], need_cpu: int, need_mem: int) -> None:
    chosen, got = pick_victims(ws, need_cpu, need_mem)
    assert all(w.be and not w.terminating for w in chosen)
    assert len({w.key for w in chosen}) == len(chosen)
    if not chosen:
        return
    last = chosen[-1]
    before = got - Resources(last.requests.milli_cpu, last.usage.memory_working_set_bytes or 0)
    # Every victim was needed: without the last one, some need was still unmet.
    assert before.milli_cpu < need_cpu or before.memory_bytes < need_mem
    # A single-resource need is exceeded by less than the last victim's share.
    if need_mem == 0:
        assert got.milli_cpu < need_cpu + last.requests.milli_cpu
    if need_cpu == 0:
        assert got.memory_bytes < need_mem + (last.usage.memory_working_set_bytes or 0)
    # No AM while another container of its application is left behind.
    for w in chosen:
        if w.is_yarn_am:
            left = [
                o
                for o in ws
                if o.app_id == w.app_id and not o.is_yarn_am and not o.terminating and o not in chosen
            ]
            assert left == []
