"""The whole agent process (`coloc-agent run`) beside koord-manager with no koordlet: local fake servers
stand in for the kubelet, the API server and the NodeManager (they cannot run here) and serve their
documented formats; real processes in real cgroups stand in for the YARN containers. The Node's origin
annotation says 0 (koord-manager's degraded value): nothing may be evicted. Once koord-manager creates the
NodeMetric, the agent writes its status (schema-valid); a NodeSLO changes the suppression threshold
(`coloc-agent status` shows it), and under a fixed HP load (a real CPU-bound process in an HP cgroup) the BE
CPU budget the agent publishes and writes to the BE tier's real CFS quota follows it within one NodeSLO
resync."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from kit.agentproc import kubeconfig, node_config, running_agent, sample
from kit.fakes.apiserver import FakeApiServer, schema_errors
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager
from kit.payload import batch_pod, nm_container, nm_containers, podlist
from kit.poll import holds, wait
from kit.ports import free_port
from kit.realcg import RealRoot
from koordslo_agent import (
    NODESLO,
    nodeslo,
    settings,
    slo_agent_config,
    threshold_is,
)

from qos.batch import ORIGIN_ANNOTATION, THIRD_PARTY_ANNOTATION

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TS = 1700000000000
GIB = 1 << 30
C1, C2 = (f"container_e17_{TS}_0001_01_00000{i}" for i in (1, 2))
ZERO = json.dumps({"resources": {"kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"}})


def _podlist() -> dict[str, object]:
    return podlist([batch_pod(f"batch-{n}", f"0a1b2c3d-0000-4000-8000-0000000000c{n}", cpu="2000")
                    for n in (1, 2)])


def _containers() -> dict[str, object]:
    app = f"application_{TS}_0001"
    return nm_containers([nm_container(c, vcores=1, mib=1024, appId=app, containerLogsLink="")
                          for c in (C1, C2)])


def test_collapsed_origin_evicts_nothing_then_nodemetric_and_nodeslo(
    real_root: RealRoot, tmp_path: Path
) -> None:
    for c in (C1, C2):
        real_root.spawn(real_root.mkcg(f"besteffort/hadoop-yarn/{c}"), ["sleep", "300"])
    node = json.loads((FIX / "apiserver" / "node.json").read_text())
    node["metadata"]["annotations"][ORIGIN_ANNOTATION] = ZERO
    for k in ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"):  # koord-manager deleted them
        del node["status"]["allocatable"][k], node["status"]["capacity"][k]
    (tmp_path / "node.json").write_text(json.dumps(node))
    (tmp_path / "pods.json").write_text(json.dumps(_podlist()))
    nm_dir = tmp_path / "nm"
    nm_dir.mkdir()
    for name in ("info.json", "apps.json"):
        (nm_dir / name).write_bytes((FIX / "nodemanager" / "3.x" / name).read_bytes())
    (nm_dir / "containers.json").write_text(json.dumps(_containers()))
    known = {("batch", f"batch-{n}"): f"0a1b2c3d-0000-4000-8000-0000000000c{n}" for n in (1, 2)}

    with (
        FakeKubelet(tmp_path / "pods.json") as kubelet,
        FakeNodeManager(nm_dir) as nm,
        FakeApiServer(tmp_path / "node.json", known) as api,
    ):
        config_file = kubeconfig(tmp_path / "kubeconfig", api.url)
        config = node_config(
            tmp_path, real_root.name, node={"scope": "cgroup-root"}, eviction={"rate_per_minute": 600},
            batch={"evict": True}, sources={
                "kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 1, "resync_s": 1},
                "yarn": {"url": nm.url, "timeout_s": 1, "resync_s": 1},
                "kube_api": {"kubeconfig": str(config_file)},
                "reporting": {"mode": "annotation", "resync_s": 10},
                "nodemetric": {"min_report_interval_s": 1, "min_aggregate_s": 1},
                "nodeslo": {"resync_s": 1},
            })
        log = (tmp_path / "agent.log").read_text
        with running_agent(config, tmp_path / "agent.log"):
            # YARN's allocations written back: the NodeManager answered and the origin was read
            assert wait(lambda: THIRD_PARTY_ANNOTATION in api.annotations, 20), log()[-3000:]
            assert holds(lambda: api.evicted == [], 4), "a collapsed origin is no reason to evict"
            for c in (C1, C2):
                assert len(real_root.pids(f"besteffort/hadoop-yarn/{c}")) == 1, "YARN containers untouched"

            # koord-manager creates the NodeMetric: the agent fills its status at the report interval.
            api.koord[("nodemetrics", "node-a")] = {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": "node-a", "resourceVersion": "5"},
                "spec": {
                    "metricCollectPolicy": {
                        "aggregateDurationSeconds": 2,
                        "reportIntervalSeconds": 1,
                        "nodeAggregatePolicy": {"durations": ["2s"]},
                    }
                },
            }
            assert wait(lambda: len(api.status_puts) >= 2, 20), log()[-3000:]
            stored = api.koord[("nodemetrics", "node-a")]
            assert schema_errors("nodemetrics", stored) == []
            # the pods have no cgroup here, so no usage: koordlet leaves such pods out too (koord-manager
            # then counts their requests)
            assert {p["name"] for p in stored["status"]["podsMetric"]} <= {"batch-1", "batch-2"}
            assert stored["status"]["hostApplicationMetric"][0]["name"] == "hadoop-yarn"
            assert api.evicted == [], "a zero origin is confirmed for 120 s before it counts"

            # NodeSLO: the suppression threshold follows it within one resync (1 s).
            api.koord[("nodeslos", "node-a")] = {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeSLO",
                "metadata": {"name": "node-a", "resourceVersion": "9"},
                "spec": {
                    "resourceUsedThresholdWithBE": {
                        "enable": True,
                        "cpuSuppressThresholdPercent": 30,
                        "cpuSuppressPolicy": "cpuset",
                    }
                },
            }
            assert schema_errors("nodeslos", api.koord[("nodeslos", "node-a")]) == []
            sock = tmp_path / "agent.sock"
            assert wait(threshold_is(sock, "30", "NodeSLO"), 5), (settings(sock), log()[-3000:])
            assert settings(sock)["suppression.policy"] == ("cpuset", "NodeSLO")


HP_BURN = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"
SLO_RESYNC_S = 2.0


def _be_quota_cores(real_root: RealRoot) -> float | None:
    """The BE tier's CFS quota as the kernel has it (None: unlimited)."""
    cg = real_root.path("cpu", "besteffort")
    quota = int((cg / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((cg / "cpu.cfs_period_us").read_text())


def test_nodeslo_threshold_moves_the_be_cpu_budget_within_one_resync(
    real_root: RealRoot, tmp_path: Path
) -> None:
    """cfsQuota suppression on a 2-CPU node (capacity 2000 m, `scope: cgroup-root`: no system usage), one HP
    process burning up to one CPU. BE may use `capacity x threshold - HP`, at least `min_milli_cpu` (100 m).
    YAML threshold 20 %: 400 m - HP (>= 400 m unless the machine starves it) -> the floor. The NodeSLO's 95 %:
    1900 m - HP (<= 1000 m) >= 900 m. The budget grows by at most `max_grow_percent` (50 %: 1000 m) a tick,
    so it must move within one NodeSLO resync plus a few ticks; HP PSI is off (`psi_threshold_percent: null`),
    as other work on this shared machine would make it stall HP and hold the growth."""
    real_root.mkcg("besteffort")
    hp = real_root.mkcg("burstable/hp-web")
    real_root.spawn(hp, [sys.executable, "-c", HP_BURN])
    port = free_port()
    suppression = {"policy": "cfsQuota", "threshold_percent": 20, "min_milli_cpu": 100,
                   "max_grow_percent": 50, "psi_threshold_percent": None}
    with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        cfg = slo_agent_config(tmp_path, real_root.name, api.url, resync_s=SLO_RESYNC_S, metrics_port=port,
                               policies={"suppression": suppression})
        sock, logf = tmp_path / "agent.sock", tmp_path / "agent.log"
        with running_agent(cfg, logf):
            def granted() -> float | None:
                return sample(port, "coloc_be_cpu_granted_cores", policy="cfsQuota")

            def low() -> bool:
                g, q = granted(), _be_quota_cores(real_root)
                return g is not None and g <= 0.4 and q is not None and q <= 0.4

            def high() -> bool:
                g, q = granted(), _be_quota_cores(real_root)
                return g is not None and g >= 0.7 and q is not None and q >= 0.7

            assert wait(low, 30), (granted(), _be_quota_cores(real_root), logf.read_text()[-3000:])
            assert settings(sock)["suppression.threshold_percent"] == ("20", "yaml")
            assert holds(low, 1.0), "the budget holds at the floor under the YAML's threshold"

            for threshold, rv, moved in ((95, "11", high), (20, "12", low)):
                api.koord[NODESLO] = nodeslo(rv, enable=True, cpuSuppressThresholdPercent=threshold,
                                             cpuSuppressPolicy="cfsQuota")
                # within one resync (the last GET may have just happened), plus a few 0.5 s ticks for the
                # budget and the status CLI's start-up
                assert wait(threshold_is(sock, str(threshold), "NodeSLO"), SLO_RESYNC_S + 3), settings(sock)
                assert wait(moved, SLO_RESYNC_S + 4), (threshold, granted(), _be_quota_cores(real_root))
