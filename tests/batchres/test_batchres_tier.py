"""The BE tier's memory cap on real cgroups (v1 here): limit and soft limit from the batch-memory budget, a
limit below what the tier holds refused by the kernel and reported (tried again next pass), off lifts
only ours."""

from __future__ import annotations

import sys
import time

import pytest
from kit.realcg import RealRoot

from agent.executors.batch_limits import TierMemoryExecutor
from cgroups.writer import CgroupWriter
from qos.tier_memory import HIGH, HIGH_MAX, OFF, tier_memory_cap

pytestmark = [pytest.mark.cgroups]
MI = 1 << 20
UNLIMITED_V1 = 0x7FFFFFFFFFFFF000


def test_tier_cap_modes_on_v1(real_root: RealRoot) -> None:
    if not real_root.hierarchy.is_v1("memory"):
        pytest.skip("v1 memory files")
    real_root.mkcg("besteffort")
    mem = real_root.path("memory", "besteffort")
    hog = real_root.spawn("besteffort", [sys.executable, "-c",
                                         "import time; b = bytearray(160 << 20); time.sleep(60)"])
    deadline = time.monotonic() + 20
    while int((mem / "memory.usage_in_bytes").read_text()) < 150 * MI and time.monotonic() < deadline:
        time.sleep(0.05)
    ex = TierMemoryExecutor(CgroupWriter(real_root.hierarchy, real_root.name), "besteffort")

    assert not ex.apply(tier_memory_cap(100 * MI, HIGH_MAX)), "no swap: 160 MiB of anon cannot fit 100 MiB"
    assert ex.error and ex.cap is None
    assert hog.poll() is None

    assert ex.apply(tier_memory_cap(512 * MI, HIGH_MAX))
    assert int((mem / "memory.limit_in_bytes").read_text()) == 512 * MI
    assert int((mem / "memory.soft_limit_in_bytes").read_text()) == 512 * MI * 90 // 100 // 4096 * 4096
    assert ex.apply(tier_memory_cap(1024 * MI, HIGH))  # loosen: the hard limit goes, the soft one moves
    assert int((mem / "memory.limit_in_bytes").read_text()) == UNLIMITED_V1
    assert int((mem / "memory.soft_limit_in_bytes").read_text()) == 1024 * MI
    assert ex.apply(tier_memory_cap(None, HIGH)) is False, "an unknown budget holds what is in place"
    assert ex.apply(tier_memory_cap(1024 * MI, OFF))
    assert int((mem / "memory.soft_limit_in_bytes").read_text()) == UNLIMITED_V1
    assert ex.cap is None and not ex.apply(tier_memory_cap(0, OFF)), "nothing of ours left to lift"
