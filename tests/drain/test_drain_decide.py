"""The pure drain decision (`qos.drain`): every verdict and the edge cases of YARN-914's semantics."""

from __future__ import annotations

from drainkit import be
from kit.snapshot import hp_workload as hp

from qos.actions import EvictReason
from qos.drain import DrainTerms, Verdict, deadline_for, decide_drain
from qos.model import Source

T0 = 1000.0


def terms(timeout: float, *, graceful: bool = True, apps: bool = False) -> DrainTerms:
    return DrainTerms(graceful, apps, T0, deadline_for(T0, timeout))


def test_deadline_is_absolute_negative_waits_forever_zero_is_now() -> None:
    assert deadline_for(T0, 30) == T0 + 30
    assert deadline_for(T0, 0) == T0
    assert deadline_for(T0, -1) is None


def test_waits_for_allocations_before_the_deadline_and_evicts_nothing() -> None:
    d = decide_drain(terms(60), [be("a"), be("b"), hp("web")], [], (), (), (), T0 + 10)
    assert d.verdict is Verdict.WAIT_ALLOCATIONS
    assert d.allocations_left == 2, "HP workloads are not allocations"
    assert d.evict == ()
    assert d.time_left_s == 50


def test_drained_when_nothing_is_left() -> None:
    d = decide_drain(terms(60), [hp("web")], [], (), (), (), T0 + 1)
    assert d.verdict is Verdict.DRAINED and d.allocations_left == 0


def test_drain_on_an_empty_node_is_done_at_once_even_with_timeout_zero() -> None:
    for timeout in (0, -1, 60):
        assert decide_drain(terms(timeout), [], [], (), (), (), T0).verdict is Verdict.DRAINED


def test_timeout_zero_evicts_everything_at_once_in_victim_order() -> None:
    ws = [be("hi", priority=5000, mem=10), be("lo-small", priority=1000, mem=1),
          be("lo-big", priority=1000, mem=100)]
    d = decide_drain(terms(0), ws, [], (), (), (), T0)
    assert d.verdict is Verdict.TIMED_OUT
    assert [e.key for e in d.evict] == ["local/besteffort/lo-big", "local/besteffort/lo-small",
                                        "local/besteffort/hi"]
    assert {e.reason for e in d.evict} == {EvictReason.DRAIN_TIMEOUT}
    assert all(e.numbers["deadline"] == T0 for e in d.evict)


def test_negative_timeout_never_times_out() -> None:
    d = decide_drain(terms(-1), [be("a")], [], (), (), (), T0 + 10 * 365 * 86400)
    assert d.verdict is Verdict.WAIT_ALLOCATIONS and d.evict == () and d.time_left_s is None


def test_deadline_passed_evicts_only_what_is_left() -> None:
    ws = [be("short"), be("long")]
    d = decide_drain(terms(5), ws, [], {"local/besteffort/short"}, (), (), T0 + 5)
    assert d.verdict is Verdict.TIMED_OUT
    assert [e.key for e in d.evict] == ["local/besteffort/long"]
    assert d.allocations_left == 1


def test_a_finished_container_does_not_hold_the_drain() -> None:
    d = decide_drain(terms(60), [be("done")], [], {"local/besteffort/done"}, (), (), T0 + 1)
    assert d.verdict is Verdict.DRAINED


def test_an_allocation_admitted_just_before_the_drain_is_waited_for_and_not_evictable() -> None:
    pending = ["yarn/container_1_0001_01_000002"]
    d = decide_drain(terms(60), [], pending, (), (), (), T0 + 1)
    assert d.verdict is Verdict.WAIT_ALLOCATIONS and d.allocations_left == 1
    late = decide_drain(terms(60), [], pending, (), (), (), T0 + 61)
    assert late.verdict is Verdict.TIMED_OUT and late.evict == () and late.allocations_left == 1
    # Once it launches it is one allocation, not two, and it is evicted at the deadline.
    launched = be("c", source=Source.YARN)
    d2 = decide_drain(terms(60), [launched], [launched.key], (), (), (), T0 + 61)
    assert d2.allocations_left == 1 and [e.key for e in d2.evict] == [launched.key]


def test_an_already_terminating_workload_counts_as_left_but_is_not_evicted_twice() -> None:
    d = decide_drain(terms(0), [be("a", terminating=True), be("b")], [], (), (), (), T0)
    assert d.allocations_left == 2
    assert [e.key for e in d.evict] == ["local/besteffort/b"]


def test_wait_for_apps_keeps_waiting_after_the_last_allocation() -> None:
    seen = {"app_1", "app_2"}
    d = decide_drain(terms(60, apps=True), [], [], (), seen, {"app_2"}, T0 + 1)
    assert d.verdict is Verdict.WAIT_APPS and d.waiting_applications == ("app_2",)
    done = decide_drain(terms(60, apps=True), [], [], (), seen, (), T0 + 2)
    assert done.verdict is Verdict.DRAINED
    # Without wait_for_apps the applications do not matter.
    assert decide_drain(terms(60), [], [], (), seen, {"app_2"}, T0 + 1).verdict is Verdict.DRAINED


def test_wait_for_apps_times_out_too() -> None:
    d = decide_drain(terms(10, apps=True), [], [], (), {"app_1"}, {"app_1"}, T0 + 11)
    assert d.verdict is Verdict.TIMED_OUT and d.evict == ()


def test_forceful_evicts_at_once_whatever_the_deadline() -> None:
    d = decide_drain(DrainTerms(False, False, T0, None), [be("a")], [], (), (), (), T0)
    assert d.verdict is Verdict.TIMED_OUT and [e.key for e in d.evict] == ["local/besteffort/a"]
    assert "forceful" in d.evict[0].message


def test_reissue_moves_the_deadline_from_the_original_start() -> None:
    # YARN: re-issuing only changes the timeout; the clock is not restarted.
    shorter, longer = deadline_for(T0, 5), deadline_for(T0, 500)
    at = T0 + 100
    ws = [be("a")]
    assert decide_drain(DrainTerms(True, False, T0, shorter), ws, [], (), (), (), at).verdict \
        is Verdict.TIMED_OUT
    assert decide_drain(DrainTerms(True, False, T0, longer), ws, [], (), (), (), at).verdict \
        is Verdict.WAIT_ALLOCATIONS
