"""The overcommit acceptance test end to end: Kubernetes asks 6 cores and YARN 5 cores of a batch origin of
8 cores. Local fake servers stand in for the kubelet, the API server and the NodeManager (they cannot run
here) and serve the documented formats; real processes in real cgroups stand in for the YARN containers.
The ledger reports 3 cores over, admissions are refused, and the releases — through the Eviction API and
by killing the YARN container — bring it within budget in the stated order; YARN's allocations are then
reported back in the Node annotation."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager
from kit.realcg import RealRoot
from kit.snapshot import node_snapshot
from kubernetes import client
from overcommitkit import C1, C2, C3, containers, overcommitted_node, pods

from agent.config.sources import KubeApiConfig, KubeletConfig, NodeManagerConfig, ReportingConfig
from agent.executors.k8s_eviction import K8sEvictor
from agent.executors.yarn_kill import YarnKiller
from agent.reporting.node_annotations import NodeReporter, ReportOutcome
from agent.sources.kubeapi import make_api_client
from agent.sources.kubelet import KubeletSource
from agent.sources.yarn import NodeManagerSource
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import Evict
from qos.admission import AdmissionFacts, BatchBudget, admit
from qos.batch import (
    THIRD_PARTY_ANNOTATION,
    BatchConfig,
    BatchState,
    decide_batch,
    ledger_view,
    parse_origin_annotation,
    parse_third_party_allocations,
    yarn_requested,
)
from qos.model import NodeSnapshot, Resources, Source

pytestmark = pytest.mark.cgroups

FIX = Path(__file__).resolve().parent.parent / "fixtures"
GIB = 1 << 30


def _snapshot(*results: object, at: float) -> NodeSnapshot:
    workloads = tuple(w for r in results for w in r.workloads)  # type: ignore[attr-defined]
    stale = {
        name: r.stale_reason
        for name, r in zip(("kubelet", "yarn"), results, strict=True)  # type: ignore[attr-defined]
        if r.stale_reason
    }  # type: ignore[attr-defined]
    return node_snapshot(workloads, taken_at=at, stale=stale)


async def test_k8s_6_plus_yarn_5_against_origin_8(
    real_root: RealRoot, tmp_path: Path, clock: FakeClock
) -> None:
    podlist, nm_dir, known = overcommitted_node(real_root, tmp_path)

    layout = Layout("cgroupfs")
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    with (
        FakeKubelet(podlist) as kubelet,
        FakeNodeManager(nm_dir) as nm,
        FakeApiServer(FIX / "apiserver" / "node.json", known) as api,
    ):
        kube = KubeletSource(
            KubeletConfig(url=kubelet.url, token_file="", timeout_s=1, resync_s=1, stale_after_s=5),
            layout,
            clock=clock,
        )
        yarn = NodeManagerSource(
            NodeManagerConfig(
                enabled=True, url=nm.url, timeout_s=1, resync_s=1, stale_after_s=5, priority=5000
            ),
            layout,
            reader.children,
            cgroup_dir=reader.dir,
            clock=clock,
        )
        conf = client.Configuration()
        conf.host = api.url
        api_client = make_api_client(KubeApiConfig(), conf)
        evictor = K8sEvictor(KubeApiConfig(), api_client, "node-a")
        killer = YarnKiller(
            layout, reader, CgroupWriter(real_root.hierarchy, real_root.name), 1.0, poll_s=0.02
        )
        reporter = NodeReporter(ReportingConfig(), api_client, "node-a", clock=clock)

        await kube.refresh()
        await yarn.refresh()
        annotations = await reporter.aread()
        assert annotations is not None and annotations.origin is not None
        origin = parse_origin_annotation(annotations.origin)
        assert origin.milli_cpu == 8000
        snap = _snapshot(kube.workloads(), yarn.workloads(), at=time.time())
        assert await reporter.areport(yarn_requested(snap.workloads)) is ReportOutcome.PATCHED
        assert (
            parse_third_party_allocations(api.annotations[THIRD_PARTY_ANNOTATION])["coloc-agent-yarn"].milli_cpu
            == 5000
        )

        view = ledger_view(origin, snap.workloads)
        assert (view.k8s_requested.milli_cpu, view.yarn_requested.milli_cpu) == (6000, 5000)
        assert view.overcommit.milli_cpu == 3000
        facts = AdmissionFacts(BatchBudget(origin), view.requested, snap.stale)
        assert not admit(Resources(500, 0), facts).accepted

        snap = dataclasses.replace(snap, origin_annotation=annotations.origin)
        actions, _ = decide_batch(snap, BatchConfig(), BatchState())
        evicts = [a for a in actions if isinstance(a, Evict)]
        assert [e.key for e in evicts] == ["k8s/0a1b2c3d-0000-4000-8000-0000000000c1", f"yarn/{C3}"]
        for e in evicts:
            w = snap.workload(e.key)
            assert w is not None
            outcome = await (evictor.evict(w, e) if w.source is Source.K8S else killer.evict(w, e))
            assert outcome.ok, outcome.detail
        assert api.evicted == [("batch", "free-pod", "0a1b2c3d-0000-4000-8000-0000000000c1")]
        assert real_root.pids(f"besteffort/hadoop-yarn/{C3}") == []
        assert (
            len(real_root.pids(f"besteffort/hadoop-yarn/{C1}"))
            == len(real_root.pids(f"besteffort/hadoop-yarn/{C2}"))
            == 1
        )

        # What the kubelet and the NodeManager report once the releases went through.
        kubelet.body = json.dumps(pods(["batch-a", "batch-b"])).encode()
        nm.docs["/ws/v1/node/containers"] = json.dumps(containers([C1, C2])).encode()
        clock.advance(1)
        await kube.refresh()
        await yarn.refresh()
        after = _snapshot(kube.workloads(), yarn.workloads(), at=time.time())
        fits = ledger_view(origin, after.workloads)
        assert fits.requested.milli_cpu == 5000 + 3000 and not fits.overcommitted
        after = dataclasses.replace(after, origin_annotation=annotations.origin)
        assert decide_batch(after, BatchConfig(), BatchState())[0] == []
        facts = AdmissionFacts(BatchBudget(origin), fits.requested, after.stale)
        assert admit(Resources(0, GIB), facts).accepted
        assert await reporter.areport(yarn_requested(after.workloads)) is ReportOutcome.PATCHED
        assert (
            parse_third_party_allocations(api.annotations[THIRD_PARTY_ANNOTATION])["coloc-agent-yarn"].milli_cpu
            == 3000
        )
