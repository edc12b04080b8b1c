"""The whole `coloc-agent run` process runs memory QoS and CPU burst with batch limits off: a Burstable pod's
CPU burst from `resource_qos:` lands in `cpu.cfs_burst_us` (real v1 cgroups, kubelet a local HTTP server with
its PodList), and `status` and /metrics show it with its source; memory QoS says once that v1 skips it."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from kit.agentproc import agent_argv, kubelet_node_config, running_agent, sample
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from cgroups.layout import Layout

pytestmark = [pytest.mark.cgroups]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet" / "podlist-mixed.json"
WEB = "web-7d9f8c-x2x9z"  # Burstable: web (limit 1 core), envoy (no CPU limit)


def _config(tmp_path: Path, root: str, url: str, port: int) -> Path:
    return kubelet_node_config(
        tmp_path, root, url, resync_s=1, metrics_port=port, metrics={"bind": "127.0.0.1"},
        batch_limits={"enabled": False},
        resource_qos={"resync_s": 1, "cpu_burst": {"policy": "cpuBurstOnly", "cpu_burst_percent": 50},
                      "memory_qos": {"ls": {"enable": True, "min_limit_percent": 50}}})


def _status(sock: Path, *args: str) -> str:
    run = subprocess.run(agent_argv("status", "--socket", str(sock), *args), capture_output=True, text=True,
                         timeout=20, check=False)
    return run.stdout if run.returncode == 0 else ""


def test_burst_without_batch_limits_written_and_shown(real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2" or not real_root.hierarchy.is_v1("memory"):
        pytest.skip("v1 files (the v2 guest: test_memqos_guest.py)")
    doc = json.loads(FIXTURE.read_text())
    pod = copy.deepcopy(next(i for i in doc["items"] if i["metadata"]["name"] == WEB))
    uid = pod["metadata"]["uid"]
    ids = {s["name"]: s["containerID"] for s in pod["status"]["containerStatuses"]}
    layout = Layout("cgroupfs")
    pod_rel, web = layout.pod(uid, "burstable"), layout.container(uid, "burstable", ids["web"])
    real_root.mkcg(web)
    real_root.mkcg(layout.container(uid, "burstable", ids["envoy"]))
    (real_root.path("cpu", web) / "cpu.cfs_quota_us").write_text("100000")  # the runtime's, of 1 core
    if not (real_root.path("cpu", web) / "cpu.cfs_burst_us").exists():
        pytest.skip("this kernel has no cpu.cfs_burst_us (before 5.14)")
    doc["items"] = [pod]
    (tmp_path / "pods.json").write_text(json.dumps(doc))
    port, sock, log = free_port(), tmp_path / "agent.sock", tmp_path / "agent.log"
    with FakeKubelet(tmp_path / "pods.json") as fake, \
            running_agent(_config(tmp_path, real_root.name, fake.url, port), log):
        burst = real_root.path("cpu", web) / "cpu.cfs_burst_us"
        assert wait(lambda: burst.read_text().strip() == "50000", 30), log.read_text()[-3000:]
        assert (real_root.path("cpu", pod_rel) / "cpu.cfs_burst_us").read_text().strip() == "50000"
        labels = {"pod": "shop/web-7d9f8c-x2x9z", "level": "container", "cgroup": web, "source": "yaml"}
        assert wait(lambda: sample(port, "coloc_cpu_burst_us", **labels) == 50_000, 10), log.read_text()

        text = _status(sock)
        assert "  shop/web-7d9f8c-x2x9z" in text, text
        assert f"    container {web}" in text and "      burst 50ms (yaml)" in text, text
        limits = json.loads(_status(sock, "--json"))["enforced_limits"]
        assert [(w["pod"], w["cpu_burst_source"]) for w in limits] == [("shop/web-7d9f8c-x2x9z", "yaml")]
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert sum("memory QoS skipped" in r["message"] for r in lines) == 1
    assert not [r for r in lines if r["level"] in ("warning", "error") and "QoS" in r["message"]]
