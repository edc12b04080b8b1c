"""Memory QoS a killed agent left is given back by the next run, where it is still the agent's own, on pure
cgroup v2 with the systemd driver (the test guest, docs/testing.md).

Real `coloc-agent run` processes on the kubelet's systemd layout (pod slices and `cri-containerd-<id>.scope`s
made through systemd, tests/kit/systemd.py) below a kubepods slice of the test's own; the kubelet is a local
HTTP server serving a PodList in the kubelet's format. The first run holds memory QoS from its YAML and is
SIGKILLed; meanwhile another writer (as the kubelet's MemoryQoS gate does, through systemd) sets one
container's `memory.min`; the next run starts with memory QoS off. It gives back the kernel's defaults
wherever the journal of holdings (`<state>.held`, cgroups/holdings.py) says the values are still its own,
and leaves the other writer's container alone.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.holdings import held as journal_held
from kit.payload import fixture_pod
from kit.poll import wait
from kit.systemd import CGROUP2, SystemdPods, enable_controllers, read, systemctl, systemd_v2_host

from agent.config.sources import KubeletConfig
from agent.daemon.resource_qos import ResourceQosRunner
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.qos_pods import QosKubeletSource
from agent.sources.settings import SettingsInForce
from cgroups.discovery import Hierarchy
from cgroups.holdings import Holding, Journal, read_boot_id
from cgroups.layout import Layout
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings
from qos.policies import PolicyConfig

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)

MI = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
DEFAULTS = (0, 0, "max")
LS = {"enable": True, "min_limit_percent": 50, "low_limit_percent": 80, "throttling_percent": 80}
RESOURCES = {
    "web": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
    "envoy": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
}


def _podlist(uid: str, ids: dict[str, str]) -> dict[str, Any]:
    """The fixture's Burstable pod with this uid and containers web and envoy (these container ids)."""
    pod = copy.deepcopy(fixture_pod())
    pod["metadata"]["uid"] = uid  # type: ignore[index]
    spec, status = pod["spec"], pod["status"]  # type: ignore[index]
    first_spec, first_status = spec["containers"][0], status["containerStatuses"][0]
    spec["containers"] = [{**first_spec, "name": n, "resources": r} for n, r in RESOURCES.items()]
    status["containerStatuses"] = [{**first_status, "name": n, "containerID": f"containerd://{ids[n]}"}
                                   for n in RESOURCES]
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod]}


def _paged(n: int) -> int:
    return n // PAGE * PAGE


def _memory(rel: str) -> tuple[int, int, str]:
    return int(read(rel, "memory.min")), int(read(rel, "memory.low")), read(rel, "memory.high")


@dataclass
class Scene:
    """A Burstable pod `web` + `envoy` on the systemd layout, its PodList at `pods`, and the values memory QoS
    puts in place (`on`, by cgroup relative to /sys/fs/cgroup)."""

    pods: SystemdPods
    layout: Layout
    podlist: Path
    web: str
    envoy: str
    on: dict[str, tuple[int, int, str]]

    def found(self) -> dict[str, tuple[int, int, str]]:
        return {rel: _memory(rel) for rel in self.on}


@pytest.fixture
def scene(own_pods: SystemdPods, tmp_path: Path) -> Scene:
    uid = str(uuid.uuid4())
    ids = {"web": uuid.uuid4().hex * 2, "envoy": uuid.uuid4().hex * 2}
    pod = own_pods.pod("burstable", uid, CPUQuotaPerSecUSec=1_500_000)
    for cid, quota in ((ids["web"], "100%"), (ids["envoy"], "50%")):
        own_pods.container(pod, ["sleep", "3600"], cid, CPUQuota=quota)
        enable_controllers(f"{own_pods.root}/{pod.rel}/cri-containerd-{cid}.scope")  # as runc does
    own_pods.tier("besteffort")
    layout = Layout("systemd", kubepods=own_pods.kubepods)
    web, envoy = (f"{own_pods.root}/{layout.container(uid, 'burstable', f'containerd://{ids[n]}')}"
                  for n in ("web", "envoy"))
    pod_rel, tier = f"{own_pods.root}/{pod.rel}", own_pods.tier_rel("burstable")
    (tmp_path / "pods.json").write_text(json.dumps(_podlist(uid, ids)))
    # koordlet's formulas (qos/memory_qos.py): min 50 %, low 80 % of the request, high 80 % of the way to the
    # limit; the pod, its tier and the kubepods slice the sums; in whole pages, as the kernel reads them back
    on = {web: (128 * MI, _paged(256 * MI * 80 // 100), str(_paged(256 * MI + 256 * MI * 80 // 100))),
          envoy: (32 * MI, _paged(64 * MI * 80 // 100), str(_paged(64 * MI + 64 * MI * 80 // 100))),
          pod_rel: (160 * MI, 256 * MI, "max"), tier: (160 * MI, 256 * MI, "max"),
          own_pods.root: (160 * MI, 256 * MI, "max")}
    return Scene(own_pods, layout, tmp_path / "pods.json", web, envoy, on)


def test_memory_qos_a_killed_agent_left_is_given_back_where_it_is_still_its_own(
        scene: Scene, tmp_path: Path) -> None:
    root, on, envoy = scene.pods.root, scene.on, scene.envoy
    sections = {"cgroups": {"root": root, "driver": "systemd"}, "batch_limits": {"enabled": False}}
    record = tmp_path / "state.json.held"
    recorded = lambda: {cg for (_, cg), h in journal_held(record).items() if h == "memory_qos"}  # noqa: E731
    with FakeKubelet(scene.podlist) as kubelet:
        held = kubelet_node_config(tmp_path, root, kubelet.url, resync_s=1,
                                   resource_qos={"resync_s": 1, "memory_qos": {"ls": LS}}, **sections)
        with running_agent(held, tmp_path / "agent.log") as agent:
            assert wait(lambda: scene.found() == on, 30), (scene.found(),
                                                           (tmp_path / "agent.log").read_text()[-3000:])
            # the kubepods slice, the burstable tier, the pod, its two containers (BE's tier holds 0 already)
            assert wait(lambda: len(recorded()) == 5, 10), "the record was not written"
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        assert scene.found() == on, "the values went with the agent"
        # another writer (the kubelet's MemoryQoS gate sets a container's memory.min to its request)
        systemctl("set-property", "--runtime", envoy.rsplit("/", 1)[-1], f"MemoryMin={64 * MI}")
        assert _memory(envoy)[0] == 64 * MI
        # memory QoS turned off while the agent was down: the next run gives back what is still its own
        off = kubelet_node_config(tmp_path, root, kubelet.url, resync_s=1, resource_qos={"resync_s": 1},
                                  **sections)
        log = tmp_path / "agent-off.log"
        want = {**dict.fromkeys(on, DEFAULTS), envoy: (64 * MI, *on[envoy][1:])}
        with running_agent(off, log) as again:
            assert wait(lambda: scene.found() == want, 30), (scene.found(), log.read_text()[-3000:])
            assert wait(lambda: recorded() == set(), 10), record.read_text()
            assert again.poll() is None
            assert "what an earlier run held is given back" in log.read_text()
        # systemd too holds the defaults, so a daemon-reload does not bring the old values back
        systemctl("daemon-reload")
        assert scene.found() == want
        assert (CGROUP2 / scene.web).is_dir()


class _Killed(Exception):
    pass


class _DiesAfterTheJournal(Journal):
    """A run killed right after its first journal write: before the knob it names is written (through systemd
    or to the file)."""

    def hold(self, holding: Holding) -> None:
        super().hold(holding)
        raise _Killed


async def test_the_record_is_written_before_the_values_it_names(scene: Scene, tmp_path: Path) -> None:
    """A run killed between its journal and its writes: the values are in the journal already."""
    root = scene.pods.root
    on_settings = ResourceQos(MemoryQosSettings(ls=MemoryQosClass(**LS)), CpuBurstSettings())
    off_settings = ResourceQos(MemoryQosSettings(), CpuBurstSettings())
    half = ResourceQos(MemoryQosSettings(ls=MemoryQosClass(**{**LS, "min_limit_percent": 25})),
                       CpuBurstSettings())
    path = tmp_path / "state.json.held"
    with FakeKubelet(scene.podlist) as kubelet_http:
        kubelet = QosKubeletSource(KubeletConfig(url=kubelet_http.url, token_file="", timeout_s=2.0,
                                                 resync_s=60.0, stale_after_s=120.0, min_resync_gap_s=0.0),
                                   scene.layout)
        await kubelet.refresh()

        writers: list[CgroupWriter] = []

        def runner(settings: ResourceQos, dies: bool = False) -> ResourceQosRunner:
            journal = (_DiesAfterTheJournal if dies else Journal)(path, read_boot_id())
            journal.load()
            writer = CgroupWriter(Hierarchy.v2(CGROUP2), root, units=SystemdUnits("/" + root),
                                  journal=journal)
            writers.append(writer)
            in_force = SettingsInForce(PolicyConfig(), settings, nodeslo=False)
            return ResourceQosRunner(kubelet, in_force, writer, scene.layout, 4 << 30)

        try:
            with pytest.raises(_Killed):
                runner(on_settings, dies=True).pass_once()
            assert scene.found() == dict.fromkeys(scene.on, DEFAULTS), "written before the journal"
            assert journal_held(path), "nothing journaled"
            # killed here: the journal names a value that was never written
            second = runner(off_settings)
            second.pass_once()
            assert scene.found() == dict.fromkeys(scene.on, DEFAULTS)
            assert journal_held(path) == {}

            # values a run holds, to be changed (a NodeSLO's new percents): killed after the journal of the
            # new values and before their write, so the files hold the old ones, which the journal names too
            third = runner(on_settings)
            third.pass_once()
            assert scene.found() == scene.on
            with pytest.raises(_Killed):
                runner(half, dies=True).pass_once()  # min 25 % of the requests now
            assert scene.found() == scene.on
            fourth = runner(off_settings)
            fourth.pass_once()
            assert scene.found() == dict.fromkeys(scene.on, DEFAULTS), "a changed value was not known"
            assert journal_held(path) == {}
        finally:
            for w in writers:
                if w.units is not None:
                    w.units.close()
