"""The whole `coloc-agent run` process puts a new BE pod's batch limits in place as its cgroup is made
(kubelet: a local HTTP server with the kubelet's PodList; real v1 cgroups; kubelet resync 30 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
from batchkit import CONTAINER, MI, POD, be_pod, read, write_list
from kit.agentproc import kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups]


def test_the_agent_limits_a_new_be_pod_from_its_mkdir(real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2":
        pytest.skip("v1 files")
    real_root.mkcg("besteffort")
    real_root.mkcg("burstable")
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        config = kubelet_node_config(tmp_path, real_root.name, fake.url, batch_limits={})
        log = tmp_path / "agent.log"
        with running_agent(config, log):
            assert wait(lambda: len(fake.seen("GET", "/pods")) >= 1, 15), log.read_text()
            cpu, mem = real_root.path("cpu", POD), real_root.path("memory", POD)
            real_root.mkcg(POD)
            assert wait(lambda: read(cpu / "cpu.cfs_quota_us") == "100000"
                        and read(mem / "memory.limit_in_bytes") == str(512 * MI)
                        and read(cpu / "cpu.shares") == "512", 5), log.read_text()
            real_root.mkcg(CONTAINER)
            ccpu = real_root.path("cpu", CONTAINER)
            assert wait(lambda: read(ccpu / "cpu.cfs_quota_us") == "100000", 5), log.read_text()


def test_off_leaves_be_pods_as_the_kubelet_made_them(real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2":
        pytest.skip("v1 files")
    for rel in ("besteffort", "burstable", POD):
        real_root.mkcg(rel)
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        config = kubelet_node_config(tmp_path, real_root.name, fake.url, batch_limits={"enabled": False})
        log = tmp_path / "agent.log"
        with running_agent(config, log):
            assert wait(lambda: len(fake.seen("GET", "/pods")) >= 1, 15), log.read_text()
            assert not wait(lambda: read(real_root.path("cpu", POD) / "cpu.cfs_quota_us") != "-1", 2)
