"""The whole agent process (`coloc-agent run`) counts only live YARN work. A local fake NodeManager serves a
`/ws/v1/node/containers` answer in the real REST format mixing live and terminal containers (fixture
`nodemanager/yarnlive-mixed`), and a local fake API server stands in for Kubernetes (neither can run here);
real processes in real `container_*` cgroups stand in for the containers. The ledger (read over the agent's
gRPC socket), the `thirdPartyAllocations` Node annotation (the PATCH body the fake API server recorded) and
the agent's Prometheus `/metrics` all carry the live containers only, the dying ones stay visible as
usage, and nothing is evicted although counting the dying containers would overcommit the origin."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kit.agentproc import kubeconfig, node_config, running_agent, sample, samples
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.nodemanager import FakeNodeManager
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from yarnkit import DYING_WITH_STATE, LIVE, LIVE_TOTAL, MIXED, cid

from agent.api.client import AgentClient
from agent.state.records import LedgerView
from qos.batch import THIRD_PARTY_ANNOTATION, parse_third_party_allocations

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

FIX = Path(__file__).resolve().parent.parent / "fixtures"
MIB = 1 << 20
WITH_PROCESS = [cid(1, 1), cid(1, 2), cid(2, 1), cid(1, 4), cid(1, 5)]  # live ones and two dying ones
EMPTY_CGROUP = [cid(1, 6)]  # DONE, its cgroup not removed yet


def _annotation_in(body: object) -> str | None:
    """The thirdPartyAllocations value in a merge patch or a JSON patch body."""
    if isinstance(body, dict):
        value = body.get("metadata", {}).get("annotations", {}).get(THIRD_PARTY_ANNOTATION)
        return value if isinstance(value, str) else None
    for op in body if isinstance(body, list) else []:
        if isinstance(op, dict) and str(op.get("path", "")).endswith("thirdPartyAllocations"):
            return str(op.get("value"))
    return None


def _ledger(sock: Path) -> LedgerView:
    async def get() -> LedgerView:
        async with AgentClient(f"unix:{sock}") as client:
            return await client.get_snapshot()
    return asyncio.run(get())


def test_agent_process_reports_only_live_yarn_containers(real_root: RealRoot, tmp_path: Path) -> None:
    for c in WITH_PROCESS:
        real_root.spawn(real_root.mkcg(f"besteffort/hadoop-yarn/{c}"), ["sleep", "300"])
    for c in EMPTY_CGROUP:
        real_root.mkcg(f"besteffort/hadoop-yarn/{c}")
    port = free_port()
    sock = tmp_path / "agent.sock"
    with FakeNodeManager(MIXED) as nm, FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        # the batch origin from the Node's annotation: 8 cores, live 6 fit, live + dying 12 would not
        config = node_config(tmp_path, real_root.name, metrics_port=port,
                             node={"cpus": 4, "memory": "8Gi"}, metrics={"bind": "127.0.0.1", "top_n": 30},
                             api={"socket_path": str(sock)}, sources={
            "yarn": {"url": nm.url, "timeout_s": 1, "resync_s": 1},
            "kube_api": {"kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", api.url))},
            "reporting": {"mode": "annotation", "resync_s": 10},  # read and written at start
        })
        with running_agent(config, tmp_path / "agent.log"):
            def tail() -> str:
                return (tmp_path / "agent.log").read_text()[-3000:]

            assert wait(lambda: THIRD_PARTY_ANNOTATION in api.annotations, 30), tail()
            entries = parse_third_party_allocations(api.annotations[THIRD_PARTY_ANNOTATION])
            reported = entries["coloc-agent-yarn"]
            assert reported == LIVE_TOTAL, reported
            patched = [_annotation_in(body) for _, body in api.patches]
            assert patched and patched[-1] is not None, api.patches
            assert parse_third_party_allocations(patched[-1])["coloc-agent-yarn"] == LIVE_TOTAL

            def metrics_ready() -> bool:
                m = samples(port)
                return (("scheduler", "yarn"),) in m.get("coloc_batch_requested_cpu_cores", {}) and bool(
                    m.get("coloc_ledger_allocations"))

            assert wait(metrics_ready, 30), tail()
            ticks = sample(port, "coloc_ticks_total") or 0
            # a few more ticks: the figures must hold, not just appear
            assert wait(lambda: (sample(port, "coloc_ticks_total") or 0) >= ticks + 3, 10), tail()
            m = samples(port)
            yarn_label = (("scheduler", "yarn"),)
            assert m["coloc_batch_requested_cpu_cores"][yarn_label] == LIVE_TOTAL.milli_cpu / 1000
            assert m["coloc_batch_requested_memory_bytes"][yarn_label] == LIVE_TOTAL.memory_bytes
            assert m["coloc_batch_overcommit_cpu_cores"][()] == 0.0
            yarn_allocs = sum(v for k, v in m["coloc_ledger_allocations"].items() if ("source", "yarn") in k)
            assert yarn_allocs == len(LIVE), m["coloc_ledger_allocations"]
            # The dying containers with a process are still usage: per-workload memory series name them.
            used = {dict(k)["name"] for k in m.get("coloc_workload_memory_working_set_bytes", {})}
            assert {cid(1, 4), cid(1, 5)} <= used, used

            view = _ledger(sock)
            yarn = {a.key: a.resources for a in view.allocations if a.key.startswith("yarn/")}
            assert set(yarn) == {f"yarn/{c}" for c in LIVE}, sorted(yarn)
            for c, (vcores, mib) in LIVE.items():
                got = yarn[f"yarn/{c}"]
                assert (got.milli_cpu, got.memory_bytes) == (vcores * 1000, mib * MIB)
            assert not set(yarn) & {f"yarn/{c}" for c in DYING_WITH_STATE}

            # Within the 8-core origin: nothing was killed.
            for c in WITH_PROCESS:
                assert len(real_root.pids(f"besteffort/hadoop-yarn/{c}")) == 1, (c, tail())
