"""CPU burst beside the kubelet's in-place resize: the kubelet's and the runtime's smaller quota is written
while the agent holds bursts, and after a SIGKILL of it, and every write succeeds; an agent started again
with CPU burst off gives back the burst the killed one left.

The kernel refuses a CFS quota below the cgroup's burst (`tg_set_cfs_bandwidth`: EINVAL), so a burst held on
a cgroup whose quota the kubelet lowers on a resize (KEP-1287: the pod cgroup's quota by the kubelet, the
container's by the runtime through UpdateContainerResources) would make that resize fail, for as long as the
burst stays — after a crash of the agent, until someone clears it by hand. A real `coloc-agent run` process
acts on real v1 cgroups laid out as the kubelet's cgroupfs driver lays them out; the kubelet is a local HTTP
server serving a PodList in the kubelet's format, whose container statuses carry `resources` as a kubelet with
InPlacePodVerticalScaling (on by default since 1.33) reports them, or do not, as an older kubelet's do.
The resize itself is made with plain file writes, as the kubelet and runc make them.
"""

from __future__ import annotations

import copy
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.poll import holds, wait
from kit.realcg import RealRoot, try_write

from cgroups.layout import Layout

pytestmark = [pytest.mark.cgroups]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet" / "podlist-mixed.json"
WEB = "web-7d9f8c-x2x9z"  # Burstable: containers web and envoy


def _podlist(path: Path, *, resizing_kubelet: bool,
             web_cpu: str = "1") -> tuple[dict[str, Any], dict[str, str]]:
    """The fixture's web pod with CPU limits web `web_cpu` (resized in place, the default policy) and envoy
    500m (`resizePolicy` cpu RestartContainer); its container ids by name."""
    doc = json.loads(FIXTURE.read_text())
    pod = copy.deepcopy(next(i for i in doc["items"] if i["metadata"]["name"] == WEB))
    limits = {"web": web_cpu, "envoy": "500m"}
    for c in pod["spec"]["containers"]:
        c["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": limits[c["name"]], "memory": "256Mi"}}
        if c["name"] == "envoy":
            c["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"},
                                 {"resourceName": "memory", "restartPolicy": "NotRequired"}]
    for s in pod["status"]["containerStatuses"]:
        if resizing_kubelet:  # what such a kubelet reports of a running container (ContainerStatus.resources)
            s["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": limits[s["name"]], "memory": "256Mi"}}
    doc["items"] = [pod]
    path.write_text(json.dumps(doc))
    return pod, {s["name"]: s["containerID"] for s in pod["status"]["containerStatuses"]}


def _burst(root: RealRoot, rel: str) -> int:
    return int((root.path("cpu", rel) / "cpu.cfs_burst_us").read_text())


def test_a_resize_lowering_the_quota_succeeds_while_bursts_are_held_and_after_a_crash(
        real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2" or not real_root.hierarchy.is_v1("cpu"):
        pytest.skip("v1 files (the v2 guest: tests/memqos/test_memqos_guest.py)")
    pods = tmp_path / "pods.json"
    pod, ids = _podlist(pods, resizing_kubelet=True)
    layout = Layout("cgroupfs")
    uid = pod["metadata"]["uid"]
    pod_rel = layout.pod(uid, "burstable")
    web, envoy = (layout.container(uid, "burstable", ids[n]) for n in ("web", "envoy"))
    for rel, quota in ((pod_rel, 150_000), (web, 100_000), (envoy, 50_000)):  # the kubelet's and runc's
        real_root.mkcg(rel)
        assert try_write(real_root.path("cpu", rel) / "cpu.cfs_quota_us", str(quota)) is None
    if not (real_root.path("cpu", web) / "cpu.cfs_burst_us").exists():
        pytest.skip("this kernel has no cpu.cfs_burst_us (before 5.14)")
    for rel, burst in ((pod_rel, 150_000), (web, 100_000)):  # left by an agent killed before the kubelet
        assert try_write(real_root.path("cpu", rel) / "cpu.cfs_burst_us", str(burst)) is None  # resized
    failed: list[str] = []

    def resize(*quotas: tuple[str, int]) -> None:
        """In the kubelet's order (`doPodResizeAction`): containers first when the limit goes down, the pod
        first when it goes up (v1 refuses a child's quota above its parent's)."""
        for rel, quota in quotas:
            err = try_write(real_root.path("cpu", rel) / "cpu.cfs_quota_us", str(quota))
            if err is not None:
                failed.append(f"{rel} quota {quota}: {err}")

    log = tmp_path / "agent.log"
    with FakeKubelet(pods) as fake:
        config = kubelet_node_config(
            tmp_path, real_root.name, fake.url, resync_s=1, batch_limits={"enabled": False},
            resource_qos={"resync_s": 1, "cpu_burst": {"policy": "cpuBurstOnly", "cpu_burst_percent": 100}})
        with running_agent(config, log) as agent:
            # where the kubelet resizes in place, only the container a CPU resize restarts holds a burst
            assert wait(lambda: _burst(real_root, envoy) == 50_000, 30), log.read_text()[-3000:]
            assert wait(lambda: _burst(real_root, pod_rel) == 0 == _burst(real_root, web), 10)
            assert holds(lambda: _burst(real_root, pod_rel) == 0 == _burst(real_root, web), 2.5)
            resize((web, 10_000), (pod_rel, 60_000))  # web's limit lowered to 100m: pod and container
            assert failed == []
            _podlist(pods, resizing_kubelet=True, web_cpu="100m")  # the pod's spec and status after it
            fake.serve(pods)
            assert holds(lambda: _burst(real_root, pod_rel) == 0 == _burst(real_root, web), 2.5)
            # a kubelet without in-place resize: pods and containers hold their bursts, up to their quotas
            _podlist(pods, resizing_kubelet=False, web_cpu="100m")
            fake.serve(pods)
            both = (pod_rel, web)
            assert wait(lambda: [_burst(real_root, r) for r in both] == [60_000, 10_000], 30), log.read_text()
            # the kubelet restarts with in-place resize on: the bursts leave before a resize can meet them
            _podlist(pods, resizing_kubelet=True, web_cpu="100m")
            fake.serve(pods)
            assert wait(lambda: _burst(real_root, pod_rel) == 0 == _burst(real_root, web), 30)
            assert _burst(real_root, envoy) == 50_000
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        # the agent is gone without a chance to undo anything: the kubelet goes on resizing
        resize((web, 5_000), (pod_rel, 55_000))
        resize((pod_rel, 90_000), (web, 40_000))
        assert failed == [], failed
        assert _burst(real_root, envoy) == 50_000  # still held: a resize of it makes a new container
        # CPU burst turned off while the agent was down: the new run holds nothing, and gives the burst back
        off = kubelet_node_config(tmp_path, real_root.name, fake.url, resync_s=1,
                                  batch_limits={"enabled": False}, resource_qos={"resync_s": 1})
        with running_agent(off, tmp_path / "agent-off.log") as again:
            assert wait(lambda: _burst(real_root, envoy) == 0, 30), (tmp_path / "agent-off.log").read_text()
            assert again.poll() is None
