"""HP's IO pressure as the guard weighs it (`agent/executors/io_guard.py`): over the last `stall_window_s`
(0.1 s), not the rates' 0.3 s, so HP that starts waiting behind a BE flood after a quiet stretch is seen
within a few polls. Hand-built polls: the arithmetic only (the guard's reading of the kernel is in
test_io_guard.py, the cut it gives in bench/io.py)."""

from __future__ import annotations

from agent.config.io import IoConfig
from agent.executors.io_guard import Poll, polls_spanning, stall_percent
from cgroups.io import IoStat

DEV = "8:0"


def _polls(waits_ms: list[float], every_s: float = 0.02) -> list[Poll]:
    """A poll every `every_s`; HP's cgroup waited `waits_ms[i]` ms in the interval ending at poll i."""
    out, total = [], 0.0
    for i, w in enumerate(waits_ms):
        total += w * 1000
        out.append(Poll(i * every_s, {DEV: IoStat()}, {DEV: IoStat()}, {"hp": int(total)}))
    return out


def test_hp_starting_behind_a_flood_shows_over_the_stall_window_not_diluted_by_the_quiet_before() -> None:
    # 0.3 s quiet, then 40 ms of HP waiting 14 % of the time (as HP's reads did behind a direct-read flood)
    polls = _polls([0.0] * 16 + [2.8, 2.8])
    short = stall_percent(polls, IoConfig().stall_window_s)
    long = stall_percent(polls, IoConfig().window_s)
    assert short is not None and long is not None
    assert short >= IoConfig().policy.stall_percent > long  # need over 0.1 s; over 0.3 s not yet
    assert round(short, 1) == 5.6 and round(long, 1) == 1.9


def test_a_lone_slow_io_in_a_quiet_stretch_is_not_need() -> None:
    polls = _polls([0.0] * 10 + [1.0] + [0.0] * 10)  # 1 ms of waiting, then nothing for 0.2 s
    assert stall_percent(polls, 0.1) == 0.0
    polls = _polls([0.0] * 10 + [1.0])
    assert stall_percent(polls, 0.1) == 1.0  # 1 ms in 0.1 s: below the 5 % that is need


def test_the_window_spans_back_to_the_newest_poll_at_least_span_old_or_the_oldest_kept() -> None:
    polls = _polls([0.0] * 6)
    assert polls_spanning(polls, 0.05) == (polls[2], polls[5])
    assert polls_spanning(polls, 1.0) == (polls[0], polls[5])
    assert polls_spanning(polls[:1], 0.1) is None
    assert stall_percent(polls[:1], 0.1) is None


def test_a_cgroup_whose_counter_went_back_is_left_out_and_none_without_any() -> None:
    a = Poll(0.0, {}, {}, {"hp": 5_000, "gone": 9_000})
    b = Poll(0.1, {}, {}, {"hp": 10_000, "gone": 100})  # "gone" was removed and made again
    assert stall_percent([a, b], 0.1) == 5.0
    assert stall_percent([Poll(0.0, {}, {}, {}), Poll(0.1, {}, {}, {})], 0.1) is None
