"""The BE tier's memory cap from the batch-memory budget (qos/tier_memory.py)."""

from __future__ import annotations

import pytest

from qos.tier_memory import HIGH, HIGH_MAX, MIN_CAP_BYTES, OFF, TierCap, tier_memory_cap

GI = 1 << 30


def test_modes() -> None:
    assert tier_memory_cap(4 * GI, OFF) == TierCap(None, None)
    assert tier_memory_cap(4 * GI, HIGH) == TierCap(4 * GI, None)
    assert tier_memory_cap(4 * GI, HIGH_MAX) == TierCap(int(4 * GI * 0.9), 4 * GI)
    assert tier_memory_cap(4 * GI, HIGH_MAX, high_percent=100) == TierCap(4 * GI, 4 * GI)


def test_an_unknown_or_zero_budget_holds_what_is_in_place() -> None:
    for mode in (HIGH, HIGH_MAX):
        assert tier_memory_cap(None, mode) is None
        assert tier_memory_cap(0, mode) is None
        assert tier_memory_cap(-5, mode) is None


def test_a_tiny_budget_is_floored() -> None:
    assert tier_memory_cap(1 << 20, HIGH_MAX) == TierCap(MIN_CAP_BYTES, MIN_CAP_BYTES)


@pytest.mark.parametrize(("mode", "pct"), [("max", 90.0), (HIGH, 0.0), (HIGH, 101.0)])
def test_bad_settings_are_named(mode: str, pct: float) -> None:
    with pytest.raises(ValueError, match="tier memory"):
        tier_memory_cap(GI, mode, pct)
