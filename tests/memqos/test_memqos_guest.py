"""Memory QoS and CPU burst on pure cgroup v2 with the systemd driver (the test guest, docs/testing.md), set
by a NodeSLO in Koordinator's format.

The kubelet's layout is made through systemd (`kubepods.slice/<kubepods>-burstable.slice/...-pod<uid>.slice/
cri-containerd-<id>.scope`, tests/kit/systemd.py) below a kubepods slice of the test's own; the kubelet is a
local HTTP server with its PodList, the API server one with the NodeSLO. The chain is the agent's: the NodeSLO
source → the settings in force → the kubelet's pods → the runner → the writer on the real cgroups and systemd.

An LS (Burstable) pod `web` (256Mi/512Mi, 1 core) + `envoy` (64Mi/no limit, 0.5 core), and a koord BE pod
(batch-memory 256Mi/512Mi). The files hold the formulas' values (memory.min/low as the kernel keeps them, in
whole pages), the pod slices and scopes hold MemoryMin/MemoryLow as systemd properties, so a daemon-reload
keeps them; the NodeSLO turning the feature off, or going, gives the kernel's defaults back.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import kubeconfig
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.systemd import CGROUP2, SystemdPods, enable_controllers, read, systemctl, systemd_v2_host

from agent.config.sources import KubeApiConfig, KubeletConfig, NodeSloConfig
from agent.daemon.resource_qos import ResourceQosRunner
from agent.sources.kubeapi import make_api_client
from agent.sources.nodeslo import FETCH_FAILED, NodeSloSource
from agent.sources.nodeslo_map import NODESLO, YAML, ResourceQos
from agent.sources.qos_pods import QosKubeletSource
from agent.sources.settings import SettingsInForce
from cgroups.discovery import Hierarchy
from cgroups.layout import Layout
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosSettings
from qos.model import Resources
from qos.policies import PolicyConfig

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
MI = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
ALLOCATABLE = 4 << 30  # the node's memory as the runner is given it (an unlimited container's high bound)
NODE = ("nodeslos", "node-a")
LS_MEM = {"minLimitPercent": 50, "lowLimitPercent": 80, "throttlingPercent": 80}
BE_MEM = {"minLimitPercent": 10, "lowLimitPercent": 20, "throttlingPercent": 90}
BURST_PERCENT = 50


def _nodeslo(rv: str, *, memory: bool | None, burst: str | None) -> dict[str, Any]:
    """A NodeSLO as koord-manager writes it; `memory` None / `burst` None: no such strategy in it."""
    spec: dict[str, Any] = {"resourceUsedThresholdWithBE": {"enable": False}}
    if memory is not None:
        spec["resourceQOSStrategy"] = {
            "lsClass": {"memoryQOS": {"enable": memory, **LS_MEM}},
            "beClass": {"memoryQOS": {"enable": memory, **BE_MEM}},
        }
    if burst is not None:
        spec["cpuBurstStrategy"] = {"policy": burst, "cpuBurstPercent": BURST_PERCENT}
    # fields as tests/memqos/test_memqos_nodeslo.py checks them against the CRD (no jsonschema in the guest)
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": NODE[1], "resourceVersion": rv}, "spec": spec}


def _pod(template: str, uid: str, containers: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """The fixture's pod `template` with a new uid and these (name, container id, resources)."""
    doc = json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text())
    item: dict[str, Any] = copy.deepcopy(next(i for i in doc["items"] if i["metadata"]["name"] == template))
    item["metadata"]["uid"] = uid
    first_spec, first_status = item["spec"]["containers"][0], item["status"]["containerStatuses"][0]
    item["spec"]["containers"] = [{**first_spec, "name": n, "resources": r} for n, _, r in containers]
    item["status"]["containerStatuses"] = [{**first_status, "name": n, "containerID": f"containerd://{c}"}
                                           for n, c, _ in containers]
    return item


def _memory(rel: str) -> tuple[int, int, str]:
    return int(read(rel, "memory.min")), int(read(rel, "memory.low")), read(rel, "memory.high")


def _paged(n: int) -> int:
    """The kernel keeps memory.min / memory.low in whole pages and reads back the rounded-down value."""
    return n // PAGE * PAGE


def _high(req: int, limit: int, percent: int) -> str:
    return str((req + (limit - req) * percent // 100) // PAGE * PAGE)


async def test_nodeslo_memory_qos_and_burst_written_held_through_systemd_and_given_back(
        own_pods: SystemdPods, tmp_path: Path) -> None:
    ls_uid, be_uid = str(uuid.uuid4()), str(uuid.uuid4())
    web_id, envoy_id, be_id = (uuid.uuid4().hex * 2 for _ in range(3))
    ls = own_pods.pod("burstable", ls_uid, CPUQuotaPerSecUSec=1_500_000)  # the kubelet's: Σ limits 1.5 cores
    be = own_pods.pod("besteffort", be_uid, CPUWeight=1)
    for pod, cid, quota in ((ls, web_id, "100%"), (ls, envoy_id, "50%"), (be, be_id, None)):
        own_pods.container(pod, ["sleep", "3600"], cid, **({"CPUQuota": quota} if quota else {}))
        enable_controllers(f"{own_pods.root}/{pod.rel}/cri-containerd-{cid}.scope")  # as runc does
    layout = Layout("systemd", kubepods=own_pods.kubepods)
    pod_ls, pod_be = layout.pod(ls_uid, "burstable"), layout.pod(be_uid, "besteffort")
    web, envoy = (layout.container(ls_uid, "burstable", f"containerd://{c}") for c in (web_id, envoy_id))
    be_ctr = layout.container(be_uid, "besteffort", f"containerd://{be_id}")
    assert (pod_ls, pod_be) == (ls.rel, be.rel)
    podlist = json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text())
    podlist["items"] = [
        _pod("web-7d9f8c-x2x9z", ls_uid, [
            ("web", web_id, {"requests": {"cpu": "500m", "memory": "256Mi"},
                             "limits": {"cpu": "1", "memory": "512Mi"}}),
            ("envoy", envoy_id, {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m"}})]),
        _pod("spark-exec-1", be_uid, [
            ("executor", be_id, {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory":
                                              "256Mi"},
                                 "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory":
                                            "512Mi"}})]),
    ]
    (tmp_path / "pods.json").write_text(json.dumps(podlist))

    def at(rel: str) -> str:
        return f"{own_pods.root}/{rel}" if rel else own_pods.root

    # The formulas (qos/memory_qos.py, qos/cpu_burst.py), worked out by hand.
    web_mem = (128 * MI, 256 * MI * 80 // 100, _high(256 * MI, 512 * MI, 80))
    envoy_mem = (32 * MI, 64 * MI * 80 // 100, _high(64 * MI, ALLOCATABLE, 80))
    ls_pod = (160 * MI, 320 * MI * 80 // 100)
    be_mem = (256 * MI * 10 // 100, 256 * MI * 20 // 100, _high(256 * MI, 512 * MI, 90))
    on = {web: web_mem, envoy: envoy_mem, be_ctr: be_mem,
          pod_ls: (*ls_pod, "max"), pod_be: (*be_mem[:2], "max"),
          layout.tier("burstable"): (*ls_pod, "max"), layout.tier("besteffort"): (*be_mem[:2], "max"),
          "": (ls_pod[0] + be_mem[0], ls_pod[1] + be_mem[1], "max")}
    bursts_on = {web: 50_000, envoy: 25_000, pod_ls: 75_000, be_ctr: 0, pod_be: 0}
    off = dict.fromkeys(on, (0, 0, "max"))

    def memory_is(want: dict[str, tuple[int, int, str]]) -> dict[str, Any]:
        """Each cgroup whose memory.min/low/high differ from `want`: rel -> (found, wanted)."""
        paged = {rel: (_paged(mn), _paged(low), high) for rel, (mn, low, high) in want.items()}
        return {rel: (_memory(at(rel)), w) for rel, w in paged.items() if _memory(at(rel)) != w}

    def bursts_are(want: dict[str, int]) -> dict[str, Any]:
        return {rel: (read(at(rel), "cpu.max.burst"), b) for rel, b in want.items()
                if read(at(rel), "cpu.max.burst") != str(b)}

    def held_by_systemd() -> dict[str, Any]:
        """Every unit's MemoryMin / MemoryLow as systemd holds them (the kubepods slice, the tiers, the pod
        slices, the scopes), where they differ."""
        out = {}
        for rel in on:
            unit = at(rel).rsplit("/", 1)[-1]
            mn, low = on[rel][:2]
            got = (systemctl("show", "-P", "MemoryMin", unit).strip(),
                   systemctl("show", "-P", "MemoryLow", unit).strip())
            if got != (str(mn), str(low)):
                out[unit] = (got, (mn, low))
        return out

    writer = CgroupWriter(Hierarchy.v2(CGROUP2), own_pods.root, units=SystemdUnits("/" + own_pods.root))
    yaml_off = ResourceQos(MemoryQosSettings(), CpuBurstSettings())
    with FakeKubelet(tmp_path / "pods.json") as kubelet_http, \
            FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        kubelet = QosKubeletSource(KubeletConfig(url=kubelet_http.url, token_file="", timeout_s=2.0,
                                                 resync_s=60.0, stale_after_s=120.0, min_resync_gap_s=0.0),
                                   layout)
        client = make_api_client(KubeApiConfig(kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", api.url))))
        settings = SettingsInForce(PolicyConfig(), yaml_off, nodeslo=True)
        slo = NodeSloSource(NodeSloConfig(enabled=True), client, NODE[1], Resources(2000, 4 << 30), settings)
        runner = ResourceQosRunner(kubelet, settings, writer, layout, ALLOCATABLE)
        assert runner.memory_supported and runner.burst_supported

        async def apply(doc: dict[str, Any] | None) -> int:
            if doc is None:
                api.koord.pop(NODE, None)
            else:
                api.koord[NODE] = doc
            got = slo.fetch()
            assert got is not FETCH_FAILED
            slo.update(got)
            await kubelet.refresh()
            return runner.pass_once()

        assert await apply(_nodeslo("1", memory=True, burst="cpuBurstOnly")) > 0
        assert settings.resource_qos is not None
        assert (settings.resource_qos.memory_source, settings.resource_qos.burst_source) == (NODESLO, NODESLO)
        assert memory_is(on) == {}
        assert bursts_are(bursts_on) == {}
        assert read(at(pod_ls), "cpu.max") == "150000 100000" and read(at(web), "cpu.max") == "100000 100000"
        assert runner.executor.errors == {}
        assert held_by_systemd() == {}
        assert runner.pass_once() == 0, "a second pass finds every value in place"

        systemctl("daemon-reload")  # systemd re-applies every unit's cgroup properties
        assert memory_is(on) == {}, "daemon-reload undid memory QoS"
        assert bursts_are(bursts_on) == {}, "daemon-reload undid the burst"
        assert runner.pass_once() == 0 and list(writer.overrides) == []

        # enable: false and policy none: the kernel's defaults back, through systemd too
        await apply(_nodeslo("2", memory=False, burst="none"))
        assert memory_is(off) == {}
        assert bursts_are(dict.fromkeys(bursts_on, 0)) == {}
        assert runner.executor.memory == {} and runner.executor.burst == {}
        systemctl("daemon-reload")
        assert memory_is(off) == {}, "daemon-reload put values back that were turned off"

        # on again, then the NodeSLO goes: the YAML (off) is in force
        await apply(_nodeslo("3", memory=True, burst="auto"))
        assert memory_is(on) == {} and bursts_are(bursts_on) == {}

        # the kubelet now resizes in place (its statuses carry resources): no burst stays where a resize
        # lowers the quota, and the kubelet's resize through systemd lands (docs/coexistence.md)
        for item in podlist["items"]:
            spec = {c["name"]: c["resources"] for c in item["spec"]["containers"]}
            for cs in item["status"]["containerStatuses"]:
                cs["resources"] = spec[cs["name"]]
        (tmp_path / "pods.json").write_text(json.dumps(podlist))
        kubelet_http.serve(tmp_path / "pods.json")
        await apply(_nodeslo("4", memory=True, burst="auto"))
        assert kubelet.kubelet_resizes is True
        assert bursts_are(dict.fromkeys(bursts_on, 0)) == {}
        for rel, quota in ((web, "10%"), (pod_ls, "60%")):  # web's limit lowered to 100m, container first
            systemctl("set-property", "--runtime", at(rel).rsplit("/", 1)[-1], f"CPUQuota={quota}")
        assert read(at(web), "cpu.max") == "10000 100000" and read(at(pod_ls), "cpu.max") == "60000 100000"
        await apply(None)
        assert (settings.resource_qos.memory_source, settings.resource_qos.burst_source) == (YAML, YAML)
        assert memory_is(off) == {} and bursts_are(dict.fromkeys(bursts_on, 0)) == {}
        assert runner.executor.errors == {}
    assert writer.units is not None
    writer.units.close()
