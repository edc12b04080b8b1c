"""Batch limits on pure cgroup v2 (the test guest, docs/testing.md): what the v1 tests beside this file show
on v1, shown where most nodes run. The layout is the cgroupfs driver's under a private root (the systemd
driver's: test_batchres_guest.py); the kubelet and the NodeManager are local HTTP servers with their exact
payloads (no kubelet or NodeManager runs here).

- a BE pod with batch-cpu 500/1000 and batch-memory 256Mi/512Mi: two CPU burners in it are held to one core,
  a 900 MiB hog in it is OOM-killed inside its container's cgroup, an HP process beside it is untouched;
- a YARN container: `memory.max` on its own cgroup, an over-limit process killed there, `hadoop-yarn`'s
  weight from Σ vcores;
- the BE tier's memory cap in each mode (`memory.high`, `memory.max`), and what v2 does where v1 refuses: a
  `memory.max` below what the tier holds makes the kernel reclaim, then OOM-kill inside the tier.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from batchkit import BIG, CONTAINER, MI, POD, SMALL, be_pod, controller, nm_fixture, write_list
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager
from kit.poll import wait
from kit.realcg import RealRoot

from agent.config.sources import NodeManagerConfig
from agent.executors.batch_limits import TierMemoryExecutor, YarnLimitsExecutor
from agent.sources.yarn import NodeManagerSource
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.settings import shares_to_weight
from cgroups.writer import CgroupWriter
from qos.tier_memory import HIGH, HIGH_MAX, OFF, tier_memory_cap
from qos.yarn_limits import yarn_plan

pytestmark = [pytest.mark.cgroups]
HOLD_64M = "b = bytearray(64 << 20); import time; time.sleep(120)"


@pytest.fixture
def v2(real_root: RealRoot) -> RealRoot:
    if real_root.hierarchy.mode != "v2":
        pytest.skip("pure cgroup v2 (the test guest); the v1 tests beside this file cover v1")
    return real_root


def _file(root: RealRoot, rel: str, name: str) -> str:
    return root.read("unified", rel, name)


def _keyed(root: RealRoot, rel: str, name: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in _file(root, rel, name).splitlines())}


def _killed(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int | None:
    wait(lambda: proc.poll() is not None, timeout_s)
    return proc.returncode


async def test_v2_be_pod_burners_held_to_one_core_a_hog_killed_in_its_container_hp_untouched(
        v2: RealRoot, tmp_path: Path) -> None:
    for rel in ("besteffort", POD, CONTAINER, "burstable/podhp"):
        v2.mkcg(rel)
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        ctl, kubelet = controller(fake.url, CgroupWriter(v2.hierarchy, v2.name), watch=False)
        await kubelet.refresh()
        assert ctl.pass_once().enforced == 1
    weight = str(shares_to_weight(512))
    for rel in (POD, CONTAINER):
        assert (_file(v2, rel, "cpu.weight"), _file(v2, rel, "cpu.max"), _file(v2, rel, "memory.max")) == \
            (weight, "100000 100000", str(512 * MI)), rel

    hp = v2.spawn("burstable/podhp", [sys.executable, "-c", HOLD_64M])
    burners = [v2.spawn(CONTAINER, [sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        wait(lambda: _keyed(v2, POD, "cpu.stat")["usage_usec"] > 200_000, 30)
        u0, t0 = _keyed(v2, POD, "cpu.stat")["usage_usec"], time.monotonic()
        wait(lambda: _keyed(v2, POD, "cpu.stat")["usage_usec"] - u0 >= 1_500_000, 30)  # 1.5 CPU-seconds
        cores = (_keyed(v2, POD, "cpu.stat")["usage_usec"] - u0) / 1e6 / (time.monotonic() - t0)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    throttled = sum(_keyed(v2, rel, "cpu.stat")["nr_throttled"] for rel in (POD, CONTAINER))
    print(f"two burners under a 1-core batch limit: {cores:.2f} cores, throttled {throttled} times")
    assert cores <= 1.1, f"two burners under a 1-core batch limit used {cores:.2f} cores"
    assert throttled > 0 or cores < 0.95, f"{cores:.2f} cores and never throttled"

    hog = v2.spawn(CONTAINER, [sys.executable, "-c", "b = bytearray(900 << 20); import time; time.sleep(60)"])
    assert _killed(hog) == -9, "the 900 MiB hog is OOM-killed at 512 MiB"
    assert _keyed(v2, CONTAINER, "memory.events")["oom_kill"] >= 1, "by its container's own memory.max"
    assert int(_file(v2, CONTAINER, "memory.peak")) <= 512 * MI
    assert hp.poll() is None, "the HP process beside it is untouched"
    assert _keyed(v2, "burstable/podhp", "memory.events")["oom_kill"] == 0


async def test_v2_yarn_container_gets_its_own_memory_max_and_an_over_limit_process_dies_there(
        v2: RealRoot, tmp_path: Path) -> None:
    layout = Layout("cgroupfs")
    big, small = layout.yarn_container(BIG), layout.yarn_container(SMALL)
    for rel in (big, small, "burstable/podhp"):
        v2.mkcg(rel)  # the LinuxContainerExecutor's cgroups (one hierarchy on v2)
    hp = v2.spawn("burstable/podhp", [sys.executable, "-c", HOLD_64M])
    hog = v2.spawn(big, [sys.executable, "-c", "import sys; sys.stdin.readline(); b = bytearray(400 << 20); "
                                               "import time; time.sleep(60)"], stdin=subprocess.PIPE)
    writer = CgroupWriter(v2.hierarchy, v2.name)
    with FakeNodeManager(nm_fixture(tmp_path)) as fake:
        cfg = NodeManagerConfig(enabled=True, url=fake.url, timeout_s=1.0, resync_s=1.0, stale_after_s=5.0)
        source = NodeManagerSource(cfg, layout, CgroupReader(v2.hierarchy, v2.name).children)
        await source.refresh()
        executor = YarnLimitsExecutor(writer, layout.yarn_root())
        report = executor.apply(yarn_plan(source.workloads().workloads))
    assert not report.pending, report.pending
    assert report.moved == 0 and not executor.mirrors, "v2: no mirror, the container's own cgroup"
    assert _file(v2, big, "memory.max") == str(256 * MI)
    assert _file(v2, small, "memory.max") == str(128 * MI)
    assert _file(v2, layout.yarn_root(), "cpu.weight") == str(shares_to_weight(3 * 1024))

    assert hog.stdin is not None
    hog.stdin.write(b"go\n")
    hog.stdin.flush()
    assert _killed(hog) == -9, "the 400 MiB process is OOM-killed at its container's 256 MiB"
    assert _keyed(v2, big, "memory.events")["oom_kill"] >= 1
    assert hp.poll() is None and _keyed(v2, "burstable/podhp", "memory.events")["oom_kill"] == 0


def test_v2_tier_cap_modes_and_a_cap_below_the_tiers_usage(v2: RealRoot) -> None:
    v2.mkcg("besteffort/pod-a")
    v2.mkcg("burstable/podhp")
    ex = TierMemoryExecutor(CgroupWriter(v2.hierarchy, v2.name), "besteffort")

    assert ex.apply(tier_memory_cap(512 * MI, HIGH))
    assert (_file(v2, "besteffort", "memory.high"), _file(v2, "besteffort", "memory.max")) == \
        (str(512 * MI), "max")
    assert ex.apply(tier_memory_cap(512 * MI, HIGH_MAX))
    high = int(_file(v2, "besteffort", "memory.high"))
    assert abs(high - 512 * MI * 90 // 100) < 4096, high  # the kernel keeps whole pages
    assert _file(v2, "besteffort", "memory.max") == str(512 * MI)
    assert ex.apply(tier_memory_cap(1024 * MI, HIGH))  # loosen: the hard limit goes, high moves
    assert (_file(v2, "besteffort", "memory.high"), _file(v2, "besteffort", "memory.max")) == \
        (str(1024 * MI), "max")
    assert ex.apply(tier_memory_cap(None, HIGH)) is False, "an unknown budget holds what is in place"

    # v1 refuses a limit below usage (EBUSY); v2 takes it, reclaims, then OOM-kills inside the tier.
    hp = v2.spawn("burstable/podhp", [sys.executable, "-c", HOLD_64M])
    hog = v2.spawn("besteffort/pod-a", [sys.executable, "-c",
                                        "import time; b = bytearray(160 << 20); time.sleep(120)"])
    assert wait(lambda: int(_file(v2, "besteffort", "memory.current")) >= 150 * MI, 60)
    assert ex.apply(tier_memory_cap(100 * MI, HIGH_MAX))
    assert _killed(hog) == -9, "no swap: 160 MiB of anon cannot stay under a 100 MiB memory.max"
    assert _keyed(v2, "besteffort", "memory.events")["oom_kill"] >= 1
    assert hp.poll() is None and _keyed(v2, "burstable/podhp", "memory.events")["oom_kill"] == 0

    assert ex.apply(tier_memory_cap(1024 * MI, OFF))
    assert (_file(v2, "besteffort", "memory.high"), _file(v2, "besteffort", "memory.max")) == ("max", "max")
    assert ex.cap is None
