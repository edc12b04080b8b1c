"""PSI on pure cgroup v2: the pressure files as the reader parses them, and triggers as the agent registers
them (agent/daemon/psi_wake.py) with the sub-second window of its default, which needs CAP_SYS_RESOURCE."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from kit.poll import window
from kit.realcg import RealRoot

from agent.config.agent import LoopConfig
from agent.config.load import ConfigError
from agent.daemon.psi_wake import PsiWaker, probe
from cgroups.parsers import parse_psi, psi_some_total
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

BUSY = [sys.executable, "-c", "while True: pass"]
UNDER_MINIMUM = "some 20000 400000"  # a 400 ms window


def _crowd(real_root: RealRoot, rel: str, n: int = 2) -> None:
    """`n` busy loops sharing cpu 0: each waits for the others, so the cgroup's CPU pressure rises."""
    real_root.mkcg(rel)
    CgroupWriter(real_root.hierarchy, real_root.name).set_cpuset(rel, [0])
    for _ in range(n):
        real_root.spawn(rel, BUSY)


def test_pressure_files_parse_and_the_fast_path_agrees(real_root: RealRoot) -> None:
    rel = "hp/crowded"
    _crowd(real_root, rel)
    with CgroupReader(real_root.hierarchy, real_root.name) as reader:
        first, second = window(lambda: reader.sample(rel), 1.0)
    before, after = first.cpu_pressure, second.cpu_pressure
    assert before is not None and after is not None
    assert after.full_total_us is not None, "a v2 cgroup's cpu.pressure has a 'full' line"
    assert after.some_total_us - before.some_total_us > 100_000, "two loops on one cpu: > 10 % stalled"
    assert psi_some_total(second.cpu_psi_raw) == after.some_total_us
    assert second.memory_pressure is not None
    for name in ("io.pressure", "memory.pressure", "cpu.pressure"):
        raw = (real_root.path("unified", rel) / name).read_bytes()
        assert parse_psi(raw, name).full_total_us is not None


def test_the_default_sub_second_trigger_is_accepted_as_root(real_root: RealRoot) -> None:
    spec = LoopConfig().psi_trigger
    assert int(spec.split()[2]) < 2_000_000, f"the default window is meant to be sub-2 s: {spec!r}"
    rel = real_root.mkcg("hp")
    assert probe(str(real_root.path("unified", rel) / "cpu.pressure"), spec) == ""


async def test_a_trigger_fires_while_a_cgroup_stalls_and_not_while_it_is_calm(real_root: RealRoot) -> None:
    quiet = real_root.mkcg("hp/quiet")
    real_root.spawn(quiet, ["sleep", "60"])
    _crowd(real_root, "hp/crowded")
    loop = asyncio.get_running_loop()
    fired: dict[str, list[float]] = {"quiet": [], "crowded": []}
    wakers = {name: PsiWaker(loop, LoopConfig().psi_trigger, lambda n=name: fired[n].append(time.monotonic()))
              for name in fired}
    try:
        for name, waker in wakers.items():
            waker.sync([str(real_root.path("unified", f"hp/{name}") / "cpu.pressure")])
            assert waker.paths, f"no trigger registered on hp/{name}"
        started = time.monotonic()
        deadline = started + 10
        while len(fired["crowded"]) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(fired["crowded"]) >= 3, "the stalled cgroup's trigger did not keep firing"
        assert fired["crowded"][0] - started < 5
        assert not fired["quiet"], "a cgroup that never waits for CPU fired"
    finally:
        for waker in wakers.values():
            waker.close()


def test_a_window_under_the_kernels_minimum_is_refused_even_as_root(real_root: RealRoot) -> None:
    """The kernel's windows run from 500 ms to 10 s whoever asks: below 500 ms is EINVAL for root too. The
    config refuses such a window (it would turn the fast path into polling on every node), and the reason a
    refused trigger gives names the window rule, not a capability root has (both found by this guest)."""
    rel = real_root.mkcg("hp")
    why = probe(str(real_root.path("unified", rel) / "cpu.pressure"), UNDER_MINIMUM)
    assert os.geteuid() == 0
    assert "Invalid argument" in why and "500 ms" in why and "CAP_SYS_RESOURCE" not in why, why
    with pytest.raises(ConfigError, match="psi_trigger"):
        LoopConfig(psi_trigger=UNDER_MINIMUM)
