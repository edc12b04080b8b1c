"""On a cgroup v1 host (real cgroups under a private root): memory QoS is skipped with one line at start-up
and no error at any pass; CPU burst is written to `cpu.cfs_burst_us` where the kernel has it, and given
back (0) when turned off."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kit.realcg import RealRoot

from agent.daemon.resource_qos import ResourceQosRunner
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.settings import SettingsInForce
from cgroups.holdings import Journal
from cgroups.layout import Layout
from cgroups.writer import CgroupWriter
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings, QosContainer, QosPod
from qos.policies import PolicyConfig

pytestmark = [pytest.mark.cgroups]
POD, CTR = "burstable/pod1111", "burstable/pod1111/ctr"


class _Pods:
    """The kubelet source as the runner reads it (`QosKubeletSource`): its pods, listed or not yet."""

    def __init__(self, pods: tuple[QosPod, ...]) -> None:
        self.pods = pods
        self.kubelet_resizes = False  # a kubelet without in-place resize: pods hold their bursts too
        self.listed = True

    def qos_pods(self) -> tuple[QosPod, ...]:
        return self.pods


def test_v1_memory_qos_one_startup_line_and_burst_written(real_root: RealRoot,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    if real_root.hierarchy.mode == "v2" or not real_root.hierarchy.is_v1("memory"):
        pytest.skip("a cgroup v1 host")
    real_root.mkcg(CTR)
    for rel, quota in ((POD, 150_000), (CTR, 100_000)):  # the kubelet's and runtime's quotas of the limits
        (real_root.path("cpu", rel) / "cpu.cfs_quota_us").write_text(str(quota))
    pod = QosPod("k8s/1111", "default/web", POD, "Burstable", None,
                 (QosContainer("c", CTR, 1 << 30, 2 << 30, 1000),))
    settings = ResourceQos(MemoryQosSettings(ls=MemoryQosClass(True, 50, 50, 80)),
                           CpuBurstSettings("cpuBurstOnly", 50))
    current = SettingsInForce(PolicyConfig(), settings, nodeslo=False)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    caplog.set_level(logging.INFO, logger="coloc")
    runner = ResourceQosRunner(_Pods((pod,)), current, writer,  # type: ignore[arg-type]
                               Layout("cgroupfs"), 8 << 30)
    for _ in range(3):
        runner.pass_once()
    skipped = [r for r in caplog.records if "memory QoS skipped" in r.getMessage()]
    assert len(skipped) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    burst_file = real_root.path("cpu", CTR) / "cpu.cfs_burst_us"
    if not burst_file.exists():
        assert any("CPU burst skipped" in r.getMessage() for r in caplog.records)
        return
    assert runner.burst_supported
    assert burst_file.read_text().strip() == "50000"  # 1 core × 50 % × 100 ms
    assert (real_root.path("cpu", POD) / "cpu.cfs_burst_us").read_text().strip() == "50000"
    current.use_resource_qos(ResourceQos(settings.memory, CpuBurstSettings("none")))
    runner.pass_once()
    assert burst_file.read_text().strip() == "0" and runner.executor.burst == {}


def test_a_burst_an_earlier_run_left_is_given_back_once_and_protected_pods_are_not_touched(
        real_root: RealRoot, tmp_path: Path) -> None:
    """The policy turned off (NodeSLO `none`) while the agent was down: the new run holds nothing, yet the
    bursts the earlier run wrote (its journal of holdings, cgroups/holdings.py) stay unless it gives them
    back; a protected or LSR pod it never wrote to stays as found, and a burst someone writes after the first
    look is not fought."""
    if real_root.hierarchy.mode == "v2" or not real_root.hierarchy.is_v1("cpu"):
        pytest.skip("v1 files (the v2 guest: tests/memqos/test_memqos_guest.py)")
    layout = {"web": ("burstable/podw", None, False), "dns": ("burstable/podd", None, True),
              "lsr": ("burstable/podl", "LSR", False)}
    pods = []
    for name, (rel, label, protected) in layout.items():
        real_root.mkcg(f"{rel}/ctr")
        for cg, quota in ((rel, 150_000), (f"{rel}/ctr", 100_000)):
            (real_root.path("cpu", cg) / "cpu.cfs_quota_us").write_text(str(quota))
        pods.append(QosPod(f"k8s/{name}", f"default/{name}", rel, "Burstable", label,
                           (QosContainer("c", f"{rel}/ctr", None, None, 1000),), protected))
    if not (real_root.path("cpu", "burstable/podw") / "cpu.cfs_burst_us").exists():
        pytest.skip("this kernel has no cpu.cfs_burst_us (before 5.14)")

    def burst(rel: str) -> int:
        return int((real_root.path("cpu", rel) / "cpu.cfs_burst_us").read_text())

    def left(rel: str, value: int) -> None:
        (real_root.path("cpu", rel) / "cpu.cfs_burst_us").write_text(str(value))

    def run(settings: ResourceQos, source: _Pods) -> ResourceQosRunner:
        journal = Journal(tmp_path / "state.json.held", "boot-1")
        journal.load()
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=journal)
        return ResourceQosRunner(source, SettingsInForce(PolicyConfig(), settings, nodeslo=False),
                                 writer, Layout("cgroupfs"), 8 << 30)  # type: ignore[arg-type]

    every = [cg for rel, _, _ in layout.values() for cg in (rel, f"{rel}/ctr")]
    for cg in every[2:]:  # someone else's, on the protected and LSR pods
        left(cg, 40_000)
    earlier = ResourceQos(MemoryQosSettings(), CpuBurstSettings("cpuBurstOnly", 50))
    run(earlier, _Pods(tuple(pods))).pass_once()
    assert [burst(cg) for cg in every] == [50_000, 50_000, 40_000, 40_000, 40_000, 40_000]
    source = _Pods(tuple(pods))
    runner = run(ResourceQos(MemoryQosSettings(), CpuBurstSettings("none")), source)
    source.listed = False  # the kubelet has not answered yet: no pod is known, none is taken for gone
    assert runner.pass_once() == 0
    assert [burst(cg) for cg in every] == [50_000, 50_000, 40_000, 40_000, 40_000, 40_000]
    source.listed = True
    runner.pass_once()
    assert [burst(cg) for cg in every] == [0, 0, 40_000, 40_000, 40_000, 40_000]
    given = runner.executor._writer.journal.stats.given_back
    assert given["cpu_burst"] == 2 and runner.executor.burst == {}
    left("burstable/podw/ctr", 30_000)  # another writer, after the first look: not fought
    runner.pass_once()
    assert burst("burstable/podw/ctr") == 30_000 and given["cpu_burst"] == 2
