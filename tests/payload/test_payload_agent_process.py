"""The whole agent process (`coloc-agent run`) against a kubelet body over the default cap. Local fake
servers stand in for the kubelet and the API server (they cannot run here) and serve the documented
formats: a v1 PodList whose BE pods overcommit the Node's batch origin (9 of 8 cores), padded with copies
of the fixture's HP pod to just over `max_body_bytes`. While the body is over the cap the kubelet source is
stale with the reason in the log and the metrics, and nothing is evicted; once the same pods come in a
normal-size body the agent does evict (so the setup really would have)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.agentproc import kubeconfig, node_config, running_agent, sample, samples
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.kubelet import FakeKubelet
from kit.payload import FIX, batch_pod, podlist_body
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.config.sources import KubeletConfig

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

BE = {"free-pod": (3500, 1), "batch-a": (5500, 2), "batch-b": (5500, 3)}  # name -> (priority, n)


def _be_pods() -> list[dict[str, object]]:
    return [batch_pod(name, f"0a1b2c3d-0000-4000-8000-0000000000c{n}", cpu="3000", priority=prio,
                      started=f"2024-05-01T10:00:0{n}Z") for name, (prio, n) in BE.items()]


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
        config = node_config(tmp_path, real_root.name, metrics_port=port, metrics={"enabled": True}, sources={
            "kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 2, "resync_s": 1,
                        "stale_after_s": 3},
            "kube_api": {"kubeconfig": str(config_file)},
            "reporting": {"mode": "annotation", "resync_s": 10},
        })
        log_path = tmp_path / "agent.log"
        with running_agent(config, log_path):
            errors = "coloc_source_fetch_errors_total"
            assert wait(lambda: (sample(port, errors, source="kubelet", kind="too_large") or 0) >= 3, 30), (
                {k: v for k, v in samples(port).items() if k.startswith("coloc_s")},
                len(kubelet.seen("GET", "/pods")), log_path.read_text()[-1500:])
            assert sample(port, "coloc_source_stale", source="kubelet") == 1
            assert len(kubelet.seen("GET", "/pods")) >= 3
            assert api.evicted == [], "evicted on a body the agent refused to read"
            assert "too_large" in log_path.read_text() and f"larger than {cap} bytes" in log_path.read_text()

            kubelet.body = normal  # the same pods, readable: now the overcommit is acted on
            assert wait(lambda: bool(api.evicted), 30), log_path.read_text()[-3000:]
            assert api.evicted == [("batch", "free-pod", "0a1b2c3d-0000-4000-8000-0000000000c1")]
            assert sample(port, "coloc_source_stale", source="kubelet") == 0
