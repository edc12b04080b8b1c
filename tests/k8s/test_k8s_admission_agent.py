"""Admissions through the real agent process's Admit RPC, on a Koordinator node: local fake servers stand in
for the kubelet and the API server (they cannot run here) and serve the documented formats. One rule decides
every admission: it refuses while a source is stale or the batch origin is unknown or held, and counts what
koord-manager subtracts from the origin, other allocators' `koord-batch` entries in
`node.koordinator.sh/thirdPartyAllocations`, as allocated."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from kit.agentproc import kubeconfig, node_config, running_agent
from kit.api import admit_request, short_dir
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.payload import FIX
from kit.poll import until
from kit.realcg import RealRoot
from overcommitkit import pods

from agent.api.client import AgentClient
from agent.state import AdmitResult, Refusal
from qos.batch import ORIGIN_ANNOTATION, THIRD_PARTY_ANNOTATION
from qos.model import Resources, Source

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

GIB = 1 << 30
ORIGIN_8 = json.dumps(
    {"resources": {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": str(32 * GIB)}})
# Another allocator's koord-batch entry (koord-manager subtracts it) and a koord-free one (it does not).
OTHERS = json.dumps({"allocations": [
    {"name": "flink-native", "priority": "koord-batch",
     "resources": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": str(2 * GIB)}},
    {"name": "spark-free", "priority": "koord-free", "resources": {"kubernetes.io/batch-cpu": "1000"}},
]})
PODS = ["batch-a", "batch-b"]  # BE pods asking 2000 + 3000 batch-cpu, 1 GiB each
req = partial(admit_request, 1)  # container `seq` of application 1, asking for `cpu` (and `mem`)


@dataclass
class Node:
    """The running agent and the fakes it talks to."""

    kubelet: FakeKubelet
    api: FakeApiServer
    socket: str
    log: Path


@contextmanager
def koord_node(real_root: RealRoot, tmp_path: Path, annotations: dict[str, str]) -> Iterator[Node]:
    """The agent on a node whose Node object carries `annotations` (besides the fixture's own, minus its
    origin): the kubelet's pods, the origin from the annotation, no YARN, nothing evicted."""
    real_root.mkcg("besteffort")  # the kubelet's BE tier (without it the agent's cgroup data is stale)
    node = json.loads((FIX / "apiserver" / "node.json").read_text())
    del node["metadata"]["annotations"][ORIGIN_ANNOTATION]
    node["metadata"]["annotations"].update(annotations)
    (tmp_path / "node.json").write_text(json.dumps(node))
    (tmp_path / "pods.json").write_text(json.dumps(pods(PODS)))
    with (
        short_dir() as d,
        FakeKubelet(tmp_path / "pods.json") as kubelet,
        FakeApiServer(tmp_path / "node.json", {}) as api,
    ):
        config = node_config(
            tmp_path, real_root.name, loop={"interval_s": 0.2}, eviction=None, batch={"evict": False},
            api={"socket_path": str(d / "agent.sock")}, sources={
                "kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 1, "resync_s": 1,
                            "stale_after_s": 2},
                "kube_api": {"kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", api.url))},
                "reporting": {"mode": "annotation", "resync_s": 10},  # the Node read at start, every 10 s
            })
        with running_agent(config, tmp_path / "agent.log"):
            yield Node(kubelet, api, str(d / "admin.sock"), tmp_path / "agent.log")  # admits: admin socket


async def ready(c: AgentClient, node: Node) -> None:
    """Acknowledged by a scheduler, and the pods and the origin read."""
    async def started() -> bool:
        try:
            await c.get_snapshot(timeout=1)
        except Exception:
            return False
        return True

    assert await until(started, 30), "the agent's API did not come up: " + node.log.read_text()[-3000:]
    view = await c.get_snapshot()
    await c.ack_recovery(1, view.identity.incarnation, view.revision)

    async def pods_seen() -> bool:
        snap = await c.get_snapshot()
        return len([a for a in snap.allocations if a.source is Source.K8S]) == len(PODS)

    assert await until(pods_seen, 20), "the kubelet's pods were not read: " + node.log.read_text()[-2000:]


async def test_other_allocators_koord_batch_entries_are_allocated(real_root: RealRoot,
                                                                   tmp_path: Path) -> None:
    """Origin 8000 m; pods 5000 m; another allocator's koord-batch entry 2000 m (koord-manager subtracts it
    from the origin, so Kubernetes sees 6000 m allocatable): 1000 m are free, not 3000 m. The koord-free
    entry is not subtracted by koord-manager and not counted here either."""
    annotations = {ORIGIN_ANNOTATION: ORIGIN_8, THIRD_PARTY_ANNOTATION: OTHERS}
    with koord_node(real_root, tmp_path, annotations) as node:
        async with AgentClient(node.socket) as c:
            await ready(c, node)

            async def origin_read() -> bool:
                return (await c.get_snapshot()).node.batch_allocatable.milli_cpu > 0

            assert await until(origin_read, 10), "no batch origin"
            snap = await c.get_snapshot()
            assert snap.node.batch_allocatable == Resources(6000, 30 * GIB), "origin - the other allocator"
            r = await c.admit(req(1, cpu=1500), 1)
            assert not r.accepted, f"1500 m admitted with 1000 m free: {r}"
            assert r.refusal is Refusal.INSUFFICIENT_CPU and r.batch_free.milli_cpu == 1000, r
            assert "other allocators 2000" in r.message, r.message
            assert (await c.admit(req(2, cpu=1000), 1)).accepted


async def test_a_stale_source_refuses_admissions_with_the_reason(real_root: RealRoot,
                                                                  tmp_path: Path) -> None:
    """The kubelet stops answering: its pods may have changed, so the room counted from them is unknown
    until it answers again."""
    with koord_node(real_root, tmp_path, {ORIGIN_ANNOTATION: ORIGIN_8}) as node:
        async with AgentClient(node.socket) as c:
            await ready(c, node)
            assert (await c.admit(req(1, cpu=500), 1)).accepted
            node.kubelet.mode = "error500"

            tries = iter(range(100, 10_000))

            async def refused() -> AdmitResult | None:  # a new key each time: an admitted one stays admitted
                r = await c.admit(req(next(tries), cpu=1), 1)
                return None if r.accepted else r

            r = await until(refused, 10)
            assert r, "admitted on a stale kubelet source"
            assert r.refusal is Refusal.BUDGET_UNKNOWN, r
            assert "stale" in r.message and "kubelet" in r.message, r.message
            keys = [a.key for a in (await c.get_snapshot()).allocations]
            assert req(next(tries) - 1, cpu=1).key not in keys, "a refusal changes nothing"
            node.kubelet.mode = "ok"

            async def accepted() -> bool:
                return (await c.admit(req(2, cpu=500), 1)).accepted

            assert await until(accepted, 10), "still refused once the kubelet answered again"


async def test_an_unknown_origin_refuses_admissions_with_the_reason(real_root: RealRoot,
                                                                    tmp_path: Path) -> None:
    """No origin annotation (koord-manager has not written one): nothing is known to be free."""
    with koord_node(real_root, tmp_path, {}) as node:
        async with AgentClient(node.socket) as c:
            await ready(c, node)
            r = await c.admit(req(1, cpu=500), 1)
            assert not r.accepted and r.refusal is Refusal.BUDGET_UNKNOWN, r
            assert "origin unknown" in r.message, r.message


async def test_a_held_origin_refuses_admissions_with_the_reason(real_root: RealRoot,
                                                                 tmp_path: Path) -> None:
    """The origin drops from 8000 m to 2000 m in one step: the batch policy holds the previous one in force
    while it confirms the drop (`origin_confirm_s`, 120 s), and no admission may be counted against it."""
    with koord_node(real_root, tmp_path, {ORIGIN_ANNOTATION: ORIGIN_8}) as node:
        async with AgentClient(node.socket) as c:
            await ready(c, node)
            assert (await c.admit(req(1, cpu=500), 1)).accepted
            node.api.node["metadata"]["annotations"][ORIGIN_ANNOTATION] = json.dumps(
                {"resources": {"kubernetes.io/batch-cpu": "2000",
                               "kubernetes.io/batch-memory": str(8 * GIB)}})

            tries = iter(range(100, 10_000))

            async def refused() -> AdmitResult | None:  # a new key each time: an admitted one stays admitted
                r = await c.admit(req(next(tries), cpu=1), 1)
                return None if r.accepted else r

            r = await until(refused, 15)  # the Node is read every 10 s
            assert r, "admitted against a held origin"
            assert r.refusal is Refusal.BUDGET_UNKNOWN, r
            assert "origin held" in r.message and "dropped" in r.message, r.message
