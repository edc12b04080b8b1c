"""`coloc-agent recover --json-yunikorn` against two real `coloc-agent run` processes, checked line by line
against YuniKorn's own si.proto (the pinned v1.8.0, compiled by sikit).

The kubelet and the YARN NodeManager cannot run here: local HTTP servers (tests/kit/fakes) serve a v1 PodList
and the NodeManager's `/ws/v1/node/containers` in the real components' formats. Each node has K8s pods (one BE
pod with batch requests, one BE pod asking for nothing), YARN containers (the ApplicationMaster, a worker and
a container that needs 0 vcores / 0 MB) with real cgroups under the test's private root, and allocations
admitted through the agent's API by an earlier scheduler (a pod with tags, a YARN AM).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import AgentProcess
from kit.api import cid, short_dir
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager
from kit.fleet import scheduled_node_config
from kit.payload import batch_pod, nm_container, nm_containers, podlist
from kit.realcg import RealRoot
from sikit import SI_VERSION, as_dict, parse_output

from agent.api.client import AgentClient
from agent.recovery import Recovery, RecoveryConfig, SchedulerState
from agent.state import AdmitRequest
from qos.model import Resources, Source

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("cpu")]

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
TS = "1700000000000"
YARN = "besteffort/hadoop-yarn"
NODES = ("yk-node-a", "yk-node-b")
USER_INFO = '{"user":"alice","groups":["data"]}'


def _uid(n: int, k: int) -> str:
    return f"0a1b2c3d-0000-4000-8000-{n:06d}{k:06d}"


def _podlist(n: int) -> dict[str, Any]:
    """The checked-in kubelet payload's BE pod twice: with batch requests, and asking for nothing."""
    items = [batch_pod(f"exec-{n}-1", _uid(n, 1), cpu="300", memory="256Mi"),
             batch_pod(f"exec-{n}-2", _uid(n, 2), cpu=None)]
    for p in items:
        p["spec"]["nodeName"] = NODES[n]
    return podlist(items)


def _containers(n: int) -> dict[str, Any]:
    """NodeManager containers of application 10+n: the AM, a worker, and one that needs nothing."""
    sizes = {1: (1, 512), 2: (1, 1024), 3: (0, 0)}
    return nm_containers([nm_container(cid(10 + n, s), vcores=vc, mib=mb, node=NODES[n])
                          for s, (vc, mb) in sizes.items()])


def _admitted(n: int) -> list[AdmitRequest]:
    return [
        AdmitRequest(key=f"k8s/{_uid(n, 9)}", application_id=f"spark-pi-{n}", source=Source.K8S,
                     resources=Resources(200, 128 << 20), request_id=f"pod-{n}", name=f"spark-pi-{n}-driver",
                     namespace="jobs", tags=(("kubernetes.io/label/app", "spark-pi"),
                                             ("yunikorn.apache.org/user.info", USER_INFO),
                                             ("kubernetes.io/label/yunikorn.apache.org/queue", "root.jobs"))),
        AdmitRequest(key=f"yarn/{cid(20 + n, 1)}", application_id=f"application_{TS}_{20 + n:04d}",
                     source=Source.YARN, resources=Resources(100, 64 << 20), request_id=f"am-{n}",
                     tags=(("yunikorn.apache.org/username", "bob"),)),
    ]


def _start(root: RealRoot, d: Path, n: int, kubelet_url: str, nm_url: str) -> subprocess.Popen[bytes]:
    node = NODES[n]
    for s in (1, 2, 3):
        root.mkcg(f"{node}/{YARN}/{cid(10 + n, s)}")
    config = scheduled_node_config(
        d, root, node, node={"cpus": 8, "memory": "16Gi"}, loop={"interval_s": 0.2},
        sources={"kubelet": {"url": kubelet_url, "token_file": "", "timeout_s": 5, "resync_s": 1},
                 "yarn": {"url": nm_url, "timeout_s": 5, "resync_s": 1}})
    return AgentProcess(config, d / f"{node}.log").start()


async def _wait_allocations(address: str, want: set[str], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline:
        try:
            async with AgentClient(address) as c:
                seen = {a.key for a in (await c.get_snapshot(timeout=2.0)).allocations}
        except Exception:  # not serving yet
            seen = set()
        if want <= seen:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{address}: allocations {sorted(seen)}, want {sorted(want)}\n"
                         f"{log.read_text()[-2000:] if log.exists() else ''}")


async def test_yunikorn_recover_output_is_accepted_by_si_proto(real_root: RealRoot) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    with short_dir() as d, ExitStack() as fakes:
        try:
            for n in range(2):
                (d / f"pods-{n}.json").write_text(json.dumps(_podlist(n)))
                kubelet = fakes.enter_context(FakeKubelet(d / f"pods-{n}.json"))
                nm_dir = d / f"nm-{n}"
                nm_dir.mkdir()
                for name in ("info.json", "apps.json"):
                    shutil.copy(FIX / "nodemanager" / "3.x" / name, nm_dir / name)
                (nm_dir / "containers.json").write_text(json.dumps(_containers(n)))
                nm = fakes.enter_context(FakeNodeManager(nm_dir))
                procs.append(_start(real_root, d, n, kubelet.url, nm.url))
            addresses = [str(d / f"{node}.admin.sock") for node in NODES]  # recovery acks, admits
            for n, addr in enumerate(addresses):
                await _wait_allocations(addr, {f"k8s/{_uid(n, 1)}", f"yarn/{cid(10 + n, 1)}"},
                                        d / f"{NODES[n]}.log")
            # An earlier scheduler (epoch 1) recovered the nodes and admitted a tagged pod and a YARN AM.
            first = Recovery(addresses, RecoveryConfig(epoch=1))
            await first.start()
            assert await first.wait_running() is SchedulerState.RUNNING
            await first.stop()
            for n, addr in enumerate(addresses):
                async with AgentClient(addr) as c:
                    for req in _admitted(n):
                        r = await c.admit(req, 1)
                        assert r.accepted, r.message

            (d / "agents.txt").write_text("\n".join(addresses) + "\n")
            out = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "agent.cli", "recover",
                                 "--agents", str(d / "agents.txt"),
                                 "--epoch", "2", "--json-yunikorn", "--quiet", "--rm-id", "yk-test"],
                capture_output=True, text=True, timeout=60, cwd=REPO)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    assert out.returncode == 0, out.stderr

    # Every line, against si.proto v1.8.0 with unknown fields refused.
    assert SI_VERSION == "v1.8.0"
    parsed = parse_output(out.stdout)
    assert len(parsed) == len(out.stdout.strip().splitlines())
    assert [name for name, _ in parsed] == ["RegisterResourceManagerRequest", "NodeRequest",
                                            "ApplicationRequest",
                                            "AllocationRequest", "NodeRequest"]
    msgs = [as_dict(m) for _, m in parsed]
    assert msgs[0]["rmID"] == "yk-test" and msgs[0]["policyGroup"] == "queues"
    assert all(m["rmID"] == "yk-test" for m in msgs)
    assert {x["nodeID"]: x["action"] for x in msgs[1]["nodes"]} == dict.fromkeys(NODES, "CREATE_DRAIN")
    schedulable = {x["nodeID"]: x["action"] for x in msgs[4]["nodes"]}
    assert schedulable == dict.fromkeys(NODES, "DRAIN_TO_SCHEDULABLE")

    allocs = {a["allocationKey"]: a for a in msgs[3]["allocations"]}
    apps = {a["applicationID"]: a for a in msgs[2]["new"]}
    for n, node in enumerate(NODES):
        # Keys: the bare pod UID (as the k8shim), the YARN container id; no zero-resource allocation.
        assert f"k8s/{_uid(n, 1)}" not in allocs and _uid(n, 1) in allocs
        assert _uid(n, 2) not in allocs and f"yarn/{cid(10 + n, 3)}" not in allocs
        for key in (f"k8s/{_uid(n, 2)}", f"yarn/{cid(10 + n, 3)}"):
            assert f"{key}: skipped on node {node}" in out.stderr
        assert "allocation contains no resources" in out.stderr
        pod = allocs[_uid(n, 1)]  # placed by Kubernetes, not by YuniKorn: foreign, no application
        assert pod["allocationTags"]["foreign"] == "default" and "applicationID" not in pod
        assert pod["allocationTags"]["kubernetes.io/meta/namespace"] == "batch"
        assert pod["allocationTags"]["kubernetes.io/meta/podName"] == f"exec-{n}-1"
        assert pod["resourcePerAlloc"]["resources"]["vcore"]["value"] == "300"
        assert pod["nodeID"] == node and pod["priority"] == 5500
        am, worker = allocs[f"yarn/{cid(10 + n, 1)}"], allocs[f"yarn/{cid(10 + n, 2)}"]
        assert am["originator"] is True and "originator" not in worker
        assert am["applicationID"] == worker["applicationID"] == f"application_{TS}_{10 + n:04d}"
        assert worker["resourcePerAlloc"]["resources"]["memory"]["value"] == str(1024 << 20)
        driver = allocs[_uid(n, 9)]  # admitted: name, namespace, tags kept
        assert driver["applicationID"] == f"spark-pi-{n}" and driver["originator"] is True
        assert "foreign" not in driver["allocationTags"]
        assert driver["allocationTags"]["kubernetes.io/label/app"] == "spark-pi"
        assert driver["allocationTags"]["kubernetes.io/meta/namespace"] == "jobs"
        assert driver["allocationTags"]["kubernetes.io/meta/podName"] == f"spark-pi-{n}-driver"
        assert apps[f"spark-pi-{n}"]["ugi"] == {"user": "alice", "groups": ["data"]}
        assert apps[f"spark-pi-{n}"]["queueName"] == "root.jobs"
        assert apps[f"spark-pi-{n}"]["tags"] == {"application.create.force": "true", "namespace": "jobs"}
        assert apps[f"application_{TS}_{20 + n:04d}"]["ugi"] == {"user": "bob"}
        assert allocs[f"yarn/{cid(20 + n, 1)}"]["originator"] is True
    # Every non-foreign allocation's application is added first; foreign ones name none.
    assert {a["applicationID"] for a in allocs.values() if "applicationID" in a} == set(apps)
    assert all(any(int(q["value"]) > 0 for q in a["resourcePerAlloc"]["resources"].values())
               for a in allocs.values())
