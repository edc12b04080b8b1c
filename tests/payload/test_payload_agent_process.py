"""The whole agent process (`coloc-agent run`) against a kubelet body over the default cap. Local fake
servers stand in for the kubelet and the API server (they cannot run here) and serve the documented
formats: a v1 PodList whose BE pods overcommit the Node's batch origin (9 of 8 cores), padded with copies
of the fixture's HP pod to just over `max_body_bytes`. While the body is over the cap the kubelet source is
stale with the reason in the log and the metrics, and nothing is evicted; once the same pods come in a
normal-size body the agent does evict (so the setup really would have)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import yaml
from kit.agentproc import kubeconfig, running_agent
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.payload import FIX, fixture_pod, podlist_body
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from prometheus_client.parser import text_string_to_metric_families

from agent.config.sources import KubeletConfig

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

BE = {"free-pod": (3500, 1), "batch-a": (5500, 2), "batch-b": (5500, 3)}  # name -> (priority, n)


def _be_pods() -> list[dict[str, object]]:
    pods = []
    for name, (prio, n) in BE.items():
        p = fixture_pod("spark-exec-1")
        p["metadata"].update(name=name, uid=f"0a1b2c3d-0000-4000-8000-0000000000c{n}")  # type: ignore[attr-defined]
        p["spec"]["priority"] = prio  # type: ignore[index]
        res = p["spec"]["containers"][0]["resources"]  # type: ignore[index]
        res["requests"] = res["limits"] = {"kubernetes.io/batch-cpu": "3000",
                                           "kubernetes.io/batch-memory": "1Gi"}
        p["status"]["startTime"] = f"2024-05-01T10:00:0{n}Z"  # type: ignore[index]
        pods.append(p)
    return pods


def _scrape(port: int) -> str:
    try:
        return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode())
    except OSError:
        return ""


def _metric(port: int, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(_scrape(port)):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_over_cap_kubelet_body_leaves_the_source_stale_and_evicts_nothing(real_root: RealRoot,
                                                                          tmp_path: Path) -> None:
    for _, n in BE.values():  # the BE pods' cgroups, as the kubelet would have made them
        real_root.mkcg(f"besteffort/pod0a1b2c3d-0000-4000-8000-0000000000c{n}")
    cap = KubeletConfig().max_body_bytes
    big = podlist_body(_be_pods(), cap + 1)
    normal = podlist_body(_be_pods())
    known = {("batch", name): f"0a1b2c3d-0000-4000-8000-0000000000c{n}" for name, (_, n) in BE.items()}
    port = free_port()
    with (
        FakeKubelet(FIX / "kubelet" / "podlist-mixed.json") as kubelet,
        FakeApiServer(FIX / "apiserver" / "node.json", known) as api,
    ):
        kubelet.body = big
        config_file = kubeconfig(tmp_path / "kubeconfig", api.url)
        cfg = {
            "node": {"name": "node-a", "cpus": 2, "memory": "4Gi"},
            "cgroups": {"root": real_root.name, "driver": "cgroupfs"},
            "loop": {"interval_s": 0.5},
            "eviction": {"grace_period_s": 1, "rate_per_minute": 60},
            "batch": {"origin": "annotation"},
            "state": {"path": str(tmp_path / "state.json")},
            "api": {"socket_path": str(tmp_path / "agent.sock")},
            "metrics": {"enabled": True, "port": port},
            "log": {"format": "json"},
            "sources": {
                "kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 2, "resync_s": 1,
                            "stale_after_s": 3},
                "kube_api": {"kubeconfig": str(config_file)},
                "reporting": {"mode": "annotation", "resync_s": 10},
            },
        }
        (tmp_path / "agent.yaml").write_text(yaml.safe_dump(cfg))
        log_path = tmp_path / "agent.log"
        with running_agent(tmp_path / "agent.yaml", log_path):
            errors = "coloc_source_fetch_errors_total"
            assert wait(lambda: (_metric(port, errors, source="kubelet", kind="too_large") or 0) >= 3, 30), (
                [ln for ln in _scrape(port).splitlines() if ln.startswith("coloc_s")],
                len(kubelet.seen("GET", "/pods")), log_path.read_text()[-1500:])
            assert _metric(port, "coloc_source_stale", source="kubelet") == 1
            assert len(kubelet.seen("GET", "/pods")) >= 3
            assert api.evicted == [], "evicted on a body the agent refused to read"
            assert "too_large" in log_path.read_text() and f"larger than {cap} bytes" in log_path.read_text()

            kubelet.body = normal  # the same pods, readable: now the overcommit is acted on
            assert wait(lambda: bool(api.evicted), 30), log_path.read_text()[-3000:]
            assert api.evicted == [("batch", "free-pod", "0a1b2c3d-0000-4000-8000-0000000000c1")]
            assert _metric(port, "coloc_source_stale", source="kubelet") == 0
