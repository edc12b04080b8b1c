"""YARN containers held to their allocation on real cgroups (v1 here): the NodeManager is a local HTTP server
with its REST payloads (fixture format); a container's cgroup exists in the cpu hierarchy only, as the
LinuxContainerExecutor's CPU handler makes it; the agent mirrors it into the memory hierarchy with the
container's memory limit, moves its processes in, and sets `hadoop-yarn`'s shares from Σ vcores."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batchkit import BIG, MI, SMALL, nm_fixture
from kit.fakes.nodemanager import FakeNodeManager
from kit.realcg import RealRoot
from prometheus_client import CollectorRegistry

from agent.config.sources import NodeManagerConfig
from agent.daemon.batch_limits import BatchLimitsController, BatchLimitsMetrics
from agent.executors.batch_limits import BatchLimitsExecutor, YarnLimitsExecutor
from agent.sources.yarn import NodeManagerSource
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.yarn_limits import yarn_plan

pytestmark = [pytest.mark.cgroups]


def _cpu_only(real_root: RealRoot, rel: str) -> None:
    """The container's cgroup as LCE's CPU handler makes it: in the cpu hierarchy only."""
    real_root.mkcg("besteffort/hadoop-yarn")
    os.mkdir(real_root.path("cpu", rel))


async def test_an_over_limit_yarn_container_is_oom_killed_in_its_own_cgroup(
        real_root: RealRoot, tmp_path: Path) -> None:
    h = real_root.hierarchy
    if h.mode == "v2" or not (h.is_v1("memory") and h.is_v1("cpu")):
        pytest.skip("the v1 memory mirror; v2 gives a container's own cgroup memory.max")
    layout = Layout("cgroupfs")
    big, small = layout.yarn_container(BIG), layout.yarn_container(SMALL)
    _cpu_only(real_root, big)
    _cpu_only(real_root, small)
    real_root.mkcg("burstable/podhp")
    hp = real_root.spawn("burstable/podhp",
                         [sys.executable, "-c", "b = bytearray(64 << 20); import time; time.sleep(60)"])
    hog = real_root.spawn(big, [sys.executable, "-c",
                                "import sys; sys.stdin.readline(); b = bytearray(400 << 20); "
                                "import time; time.sleep(60)"], stdin=subprocess.PIPE)
    assert not (real_root.path("memory", big)).exists()
    reader = CgroupReader(h, real_root.name)
    writer = CgroupWriter(h, real_root.name)
    with FakeNodeManager(nm_fixture(tmp_path)) as fake:
        cfg = NodeManagerConfig(enabled=True, url=fake.url, timeout_s=1.0, resync_s=1.0, stale_after_s=5.0)
        source = NodeManagerSource(cfg, layout, reader.children)
        await source.refresh()
        executor = YarnLimitsExecutor(writer, layout.yarn_root())
        report = executor.apply(yarn_plan(source.workloads().workloads))
    assert not report.pending, report.pending
    mem = real_root.path("memory", big)
    assert int((mem / "memory.limit_in_bytes").read_text()) == 256 * MI
    assert int((real_root.path("memory", small) / "memory.limit_in_bytes").read_text()) == 128 * MI
    assert hog.pid in {int(p) for p in (mem / "cgroup.procs").read_text().split()}, "moved into its mirror"
    assert report.moved == 1
    assert int((real_root.path("cpu", "besteffort/hadoop-yarn") / "cpu.shares").read_text()) == 3 * 1024

    ctl = BatchLimitsController(None, BatchLimitsExecutor(writer), layout,
                                lambda rel: writer.path("cpu", rel), yarn=(source, executor, False))
    registry = CollectorRegistry()
    registry.register(BatchLimitsMetrics(ctl))
    assert registry.get_sample_value("coloc_yarn_limit_memory_bytes", {"container": BIG}) == 256 * MI
    assert registry.get_sample_value("coloc_yarn_root_cpu_shares") == 3 * 1024

    assert hog.stdin is not None
    hog.stdin.write(b"go\n")
    hog.stdin.flush()
    deadline = time.monotonic() + 30
    while hog.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hog.returncode == -9, f"the 400 MiB hog should be OOM-killed at 256 MiB, got {hog.returncode}"
    oom = dict(line.split() for line in (mem / "memory.oom_control").read_text().splitlines())
    assert int(oom.get("oom_kill", "1")) >= 1, "killed by its own container's memory cgroup"
    assert hp.poll() is None, "HP work beside it is untouched"

    # the container ends: the NodeManager stops listing it; its empty mirror goes, the NM's cgroup stays
    report = executor.apply(yarn_plan(()))
    assert report.removed == 2 and not mem.exists() and real_root.path("cpu", big).exists()
