"""The BE tier's memory cap on real cgroups (v1 here): limit and soft limit from the batch-memory budget, a
limit below what the tier holds refused by the kernel and reported (tried again next pass), off lifts
only ours."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from kit.agentproc import kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.holdings import held
from kit.poll import holds, wait
from kit.realcg import RealRoot

from agent.daemon.tier_cap import TierCapRunner
from agent.executors.batch_limits import TIER_CAP, TierMemoryExecutor
from cgroups.holdings import Journal
from cgroups.writer import CgroupWriter
from qos.tier_memory import HIGH, HIGH_MAX, OFF, TierCap, tier_memory_cap

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


def _limit(real_root: RealRoot) -> int:
    return int((real_root.path("memory", "besteffort") / "memory.limit_in_bytes").read_text())


def test_a_cap_a_killed_agent_left_is_lifted_by_the_next_run_unless_another_writer_changed_it(
        real_root: RealRoot, tmp_path: Path) -> None:
    """Real `coloc-agent run` processes on real v1 cgroups; the kubelet is a local HTTP server serving an
    empty PodList in the kubelet's format. A run capping the BE tier (`high+max`) is SIGKILLed; the next run,
    with the cap off (batch limits off altogether, then the cap alone off), lifts the cap it finds still its
    own, and leaves one another writer set meanwhile."""
    if not real_root.hierarchy.is_v1("memory"):
        pytest.skip("v1 memory files (the cap on v2: test_batchres_v2.py)")
    real_root.mkcg("besteffort")
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}))
    log = tmp_path / "agent.log"

    def config(**batch_limits: object) -> Path:
        return kubelet_node_config(tmp_path, real_root.name, fake.url, resync_s=1,
                                   batch_limits={"resync_s": 1, **batch_limits})

    def capped_then_killed() -> int:
        with running_agent(config(tier_memory="high+max"), log) as agent:
            assert wait(lambda: _limit(real_root) < UNLIMITED_V1, 30), log.read_text()[-3000:]
            cap = _limit(real_root)
            capped = {("memory_limit", "besteffort"): "be_tier_memory_cap",
                      ("memory_high", "besteffort"): "be_tier_memory_cap"}
            assert wait(lambda: held(tmp_path / "state.json.held") == capped, 10), "the cap was not recorded"
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        assert _limit(real_root) == cap, "the cap went with the agent"
        return cap

    with FakeKubelet(pods) as fake:
        capped_then_killed()
        with running_agent(config(enabled=False), log) as again:  # batch limits off: no controller at all
            assert wait(lambda: _limit(real_root) == UNLIMITED_V1, 30), log.read_text()[-3000:]
            assert again.poll() is None
        cap = capped_then_killed()
        theirs = cap // 2 // 4096 * 4096  # another writer (an operator, a kubelet reservation) meanwhile
        (real_root.path("memory", "besteffort") / "memory.limit_in_bytes").write_text(str(theirs))
        with running_agent(config(tier_memory="off"), log) as again:
            assert holds(lambda: _limit(real_root) == theirs, 3.0), "another writer's limit was lifted"
            assert again.poll() is None


class _Killed(Exception):
    pass


class _KilledAfterWriting(TierMemoryExecutor):
    def apply(self, cap: TierCap | None) -> bool:
        super().apply(cap)
        raise _Killed  # the agent dies here: after the write, before anything else is recorded


async def test_a_cap_is_recorded_before_it_is_written(real_root: RealRoot, tmp_path: Path) -> None:
    """A run killed right after its write of a new cap: the next run still knows the cap for its own (real
    v1 cgroups; each run a writer with the journal of holdings read afresh, as a restarted agent has)."""
    if not real_root.hierarchy.is_v1("memory"):
        pytest.skip("v1 memory files")
    real_root.mkcg("besteffort")
    path = tmp_path / "state.json.held"

    def run(cap: TierCap | None, boot: str = "boot-1",
            executor: type[TierMemoryExecutor] = TierMemoryExecutor) -> TierCapRunner:
        journal = Journal(path, boot)
        journal.load()
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=journal)
        return TierCapRunner(executor(writer, "besteffort"), lambda: cap)

    assert run(tier_memory_cap(512 * MI, HIGH_MAX)).pass_once()
    assert _limit(real_root) == 512 * MI
    assert set(held(path).values()) == {"be_tier_memory_cap"}
    # the budget grows; the run dies once the looser cap is written
    with pytest.raises(_Killed):
        run(tier_memory_cap(768 * MI, HIGH_MAX), executor=_KilledAfterWriting).pass_once()
    assert _limit(real_root) == 768 * MI
    # the next run, with the cap off, finds the cap in the journal and lifts it
    third = run(tier_memory_cap(None, OFF))
    assert third.pass_once()
    assert _limit(real_root) == UNLIMITED_V1
    assert held(path) == {}
    assert not third.pass_once(), "nothing of ours left"
    # a journal of another boot lifts nothing
    other = run(None, boot="boot-2")
    with other.executor._writer.held_by(TIER_CAP):
        other.executor._writer.set_memory_limit("besteffort", 256 * MI)
    assert not run(tier_memory_cap(None, OFF)).pass_once()
    assert _limit(real_root) == 256 * MI
