"""The whole `coloc-agent run` process puts a new BE pod's batch limits in place as its cgroup is made
(kubelet: a local HTTP server with the kubelet's PodList; real v1 cgroups; kubelet resync 30 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from batchkit import CONTAINER, MI, POD, be_pod, read, write_list
from kit.agentproc import running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups]


def _config(tmp_path: Path, root: str, url: str, **batch_limits: object) -> Path:
    cfg = {
        "node": {"name": "node-a", "cpus": 2, "memory": "4Gi"},
        "cgroups": {"root": root, "driver": "cgroupfs"},
        "loop": {"interval_s": 0.5},
        "eviction": {"dry_run": True},
        "state": {"path": str(tmp_path / "state.json")},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
        "metrics": {"enabled": False},
        "batch_limits": batch_limits,
        "sources": {"kubelet": {"url": url, "token_file": "", "timeout_s": 1, "resync_s": 30,
                                "stale_after_s": 60},
                    "kube_api": {"enabled": False}, "reporting": {"mode": "off"}},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_agent_limits_a_new_be_pod_from_its_mkdir(real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2":
        pytest.skip("v1 files")
    real_root.mkcg("besteffort")
    real_root.mkcg("burstable")
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        config = _config(tmp_path, real_root.name, fake.url)
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
        config = _config(tmp_path, real_root.name, fake.url, enabled=False)
        log = tmp_path / "agent.log"
        with running_agent(config, log):
            assert wait(lambda: len(fake.seen("GET", "/pods")) >= 1, 15), log.read_text()
            assert not wait(lambda: read(real_root.path("cpu", POD) / "cpu.cfs_quota_us") != "-1", 2)
