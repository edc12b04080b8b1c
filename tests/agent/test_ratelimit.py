"""The eviction token bucket: burst, refill rate, no overfill."""

from __future__ import annotations

import pytest

from agent.executors.ratelimit import TokenBucket


def test_burst_then_refill() -> None:
    b = TokenBucket(rate_per_s=0.5, burst=3, now=0.0)
    assert [b.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not b.take(1.0)  # half a token
    assert b.take(2.0)
    assert not b.take(2.0)


def test_never_more_than_burst() -> None:
    b = TokenBucket(rate_per_s=10, burst=2, now=0.0)
    assert b.available(1000.0) == 2.0


def test_time_going_backwards_does_not_mint_tokens() -> None:
    b = TokenBucket(rate_per_s=1, burst=1, now=10.0)
    assert b.take(10.0)
    assert not b.take(5.0)


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (1, 0), (-1, 3)])
def test_rejects_bad_settings(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst, 0.0)
