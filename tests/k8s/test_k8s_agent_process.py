"""The whole agent process (`coloc-agent run`) wired to Kubernetes and YARN: local fake servers stand in for
the kubelet, the API server and the NodeManager (they cannot run here) and serve the documented formats;
real processes in real cgroups stand in for the YARN containers. Kubernetes asks 6 cores and YARN 5 of a
batch origin of 8 (the Node annotation): the agent itself reads the origin, refuses admissions, releases
the free-tier pod through the Eviction API and kills the newest YARN container, and reports YARN's
allocations back on the Node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.agentproc import kubeconfig, node_config, running_agent
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager
from kit.payload import FIX
from kit.poll import holds, wait
from kit.realcg import RealRoot
from overcommitkit import C1, C2, C3, containers, overcommitted_node, pods

from qos.batch import THIRD_PARTY_ANNOTATION, parse_third_party_allocations

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


def test_agent_process_arbitrates_k8s_and_yarn_against_the_node_origin(real_root: RealRoot,
                                                                       tmp_path: Path) -> None:
    podlist, nm_dir, known = overcommitted_node(real_root, tmp_path)

    with (
        FakeKubelet(podlist) as kubelet,
        FakeNodeManager(nm_dir) as nm,
        FakeApiServer(FIX / "apiserver" / "node.json", known) as api,
    ):
        config = node_config(tmp_path, real_root.name, sources={
            "kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 1, "resync_s": 1},
            "yarn": {"url": nm.url, "timeout_s": 1, "resync_s": 1},
            "kube_api": {"kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", api.url))},
            "reporting": {"mode": "annotation", "resync_s": 10},  # read and written at start
        })
        with running_agent(config, tmp_path / "agent.log"):
            evicted = wait(lambda: bool(api.evicted), 30)
            assert evicted, (tmp_path / "agent.log").read_text()[-3000:]
            assert api.evicted == [("batch", "free-pod", "0a1b2c3d-0000-4000-8000-0000000000c1")]
            assert wait(lambda: real_root.pids(f"besteffort/hadoop-yarn/{C3}") == [], 15), \
                "the newest YARN container was not killed"
            assert len(real_root.pids(f"besteffort/hadoop-yarn/{C1}")) == 1, "the AM must survive"
            assert len(real_root.pids(f"besteffort/hadoop-yarn/{C2}")) == 1, "exactly enough is released"
            assert wait(lambda: THIRD_PARTY_ANNOTATION in api.annotations, 15)
            reported = parse_third_party_allocations(api.annotations[THIRD_PARTY_ANNOTATION])
            assert reported["coloc-agent-yarn"].milli_cpu in (5000, 3000)

            # What the kubelet and the NodeManager report once the releases went through: no more.
            kubelet.body = json.dumps(pods(["batch-a", "batch-b"])).encode()
            nm.docs["/ws/v1/node/containers"] = json.dumps(containers([C1, C2])).encode()
            assert holds(lambda: len(api.evicted) == 1, 3)
            assert len(real_root.pids(f"besteffort/hadoop-yarn/{C2}")) == 1
            audit = [json.loads(line)["fields"]["audit"]
                     for line in (tmp_path / "agent.log").read_text().splitlines()
                     if line.startswith("{") and '"audit"' in line]
            started = [a["target"] for a in audit if a["kind"] == "evict" and a["outcome"] == "started"]
            assert started == ["k8s/0a1b2c3d-0000-4000-8000-0000000000c1", f"yarn/{C3}"]
