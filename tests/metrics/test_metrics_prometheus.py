"""A real Prometheus server (Debian package `prometheus`) scrapes the agent's metrics server.

The first test feeds the board a `Published` built from a hand-made snapshot (tests/metrics/nodes.py); the
metrics server, the HTTP scrape and Prometheus itself are real. The last runs a real agent process (real
cgroups, its kubelet a local HTTP server) under the shipped scrape job and alert rules (their `for` cut to
2 s in a test-only copy), makes real conditions happen and reads the alerts from Prometheus's own API.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kit.agentproc import AgentProcess, node_config
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from nodes import GiB, publication
from promserver import PrometheusError, PrometheusServer, static_kubernetes_pod

from agent.demo.spawn import workload_argv
from agent.metrics import LedgerFigures
from agent.published import ActionRecord, Board
from qos.model import Resources

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / "coloc-agent.rules.yml"


def test_prometheus_scrapes_the_agent_and_sees_the_published_values(prometheus, serve) -> None:
    board = Board()
    now = time.time()
    first = publication(
        tick=41,
        actions=(ActionRecord(now, "suppression", "SetBeCpuset", "besteffort", "applied", "hp busy"),),
        tick_duration_s=0.004,
    )
    board.publish(first)
    ledger = LedgerFigures(revision=12, lifecycle="schedulable", batch_origin=Resources(3000, 4 * GiB))
    hub, server = serve(board, ledger_view=lambda: ledger)
    hub.observe(first)
    second = dataclasses.replace(first, tick=42, tick_duration_s=0.2, actions=())  # nothing new done
    board.publish(second)
    hub.observe(second)

    host, port = server.address
    prom = prometheus([f"{host}:{port}"], rule_files=[RULES])
    prom.wait_for_scrape()

    assert prom.value('up{job="coloc-agent"}') == 1
    assert prom.value('coloc_cpu_usage_cores{scope="hp"}') == 2.0
    assert prom.value('coloc_tier_cpu_usage_cores{tier="besteffort"}') == 0.75
    assert prom.value('coloc_evictions_total{reason="memory_pressure",source="k8s"}') == 3
    assert prom.value('coloc_evictions_total{reason="cpu_satisfaction",source="yarn"}') == 0
    assert prom.value('coloc_be_cpu_granted_cores{policy="cpuset"}') == 1.0
    assert prom.value('coloc_node_lifecycle_state{state="schedulable"}') == 1
    assert prom.value('coloc_node_lifecycle_state{state="decommissioning"}') == 0
    # k8s 1.5 + yarn 2.0 requested against an origin of 3.0 cores
    assert prom.value("coloc_batch_overcommit_cpu_cores") == 0.5
    assert prom.value('coloc_source_stale{source="yarn"}') == 1
    assert prom.value('coloc_source_stale{source="kubelet"}') == 0
    # one observation per tick: 4 ms and 200 ms
    assert prom.value("coloc_tick_duration_seconds_count") == 2
    assert prom.value('coloc_tick_duration_seconds_bucket{le="0.005"}') == 1
    assert prom.value('coloc_actions_total{policy="suppression",kind="SetBeCpuset",outcome="applied"}') == 1
    rss = prom.value('process_resident_memory_bytes{job="coloc-agent"}')
    assert rss is not None and rss > 10 << 20

    # the scrape reads the board live: a new publication shows up in Prometheus
    counters = dataclasses.replace(second.counters, evictions={("memory_pressure", "k8s"): 5})
    board.publish(dataclasses.replace(second, tick=43, counters=counters))
    prom.wait_until('coloc_evictions_total{reason="memory_pressure",source="k8s"}', lambda v: v == 5)

    # every alert rule evaluates against the live series without error
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 8
    deadline = time.monotonic() + 15
    while any(r.get("lastEvaluation", "").startswith("0001") for r in rules) and time.monotonic() < deadline:
        time.sleep(0.5)
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert [(r["name"], r["health"]) for r in rules if r["health"] != "ok"] == []


# -- the shipped scrape job and alert rules, on a real agent -------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
SCRAPE = REPO / "deploy" / "prometheus" / "scrape" / "coloc-agent.scrape.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "coloc-agent.json"
PODLIST = REPO / "tests" / "fixtures" / "kubelet" / "podlist-mixed.json"
RUNBOOKS = "https://github.com/coloc-agent/coloc-agent/blob/main/docs/runbooks.md#"
QUICK_FOR = "2s"
# What kubernetes_sd_configs (role pod) gives the DaemonSet's pod, and a pod of something else beside it
AGENT_POD = {"namespace": "coloc-system", "pod_name": "coloc-agent-x7k2p", "pod_node_name": "node-a",
             "pod_label_app_kubernetes_io_name": "coloc-agent", "pod_container_port_name": "metrics"}
LISTED_PODS = ("besteffort/pod0a1b2c3d-0000-4000-8000-000000000001",  # of podlist-mixed.json
               "pod0a1b2c3d-0000-4000-8000-000000000003", "burstable")
OTHER_POD = {**AGENT_POD, "pod_name": "koordlet-abcde", "pod_label_app_kubernetes_io_name": "koordlet"}


def quick_rules(tmp_path: Path) -> Path:
    """A test-only copy of the shipped rules whose `for` is 2 s instead of minutes (5 m for ColocSourceStale
    and ColocAgentDown): the expressions, labels and annotations are the shipped ones."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = QUICK_FOR
    path = tmp_path / "coloc-agent.quick.rules.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def shipped_job(port: int) -> dict[str, Any]:
    """The shipped scrape job, its Kubernetes discovery (Debian's Prometheus is built without it) replaced by
    the targets it would find: the agent's pod on `port`, and another pod its relabelling must drop."""
    (job,) = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    out = static_kubernetes_pod(job, f"127.0.0.1:{port}", AGENT_POD, interval="1s")
    other = static_kubernetes_pod(job, f"127.0.0.1:{free_port()}", OTHER_POD)["static_configs"]
    out["static_configs"] += other
    return out


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel, PromQL) of every dashboard panel, its Grafana variables given values Prometheus takes."""
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for panel in doc["panels"]:
        for t in panel.get("targets") or []:
            expr = t["expr"].replace("$node", ".*").replace("$__rate_interval", "5s")
            out.append((panel["title"], expr.replace("$__range", "1m")))
    return out


def kubelet_node(tmp_path: Path, root: str, kubelet_url: str, port: int) -> Path:
    """A node agent whose only source is the kubelet at `kubelet_url`, stale 3 s after its last good list."""
    sources = {"kubelet": {"url": kubelet_url, "token_file": "", "timeout_s": 1, "resync_s": 0.5,
                           "stale_after_s": 3},
               "kube_api": {"enabled": False}, "reporting": {"mode": "off"}}
    return node_config(tmp_path, root, metrics_port=port, eviction={"dry_run": True}, batch=None,
                       sources=sources)


@pytest.mark.cgroups
@pytest.mark.slow
def test_the_shipped_job_and_rules_fire_on_a_kubelet_that_stops_answering_and_an_agent_that_stops(
        real_root: RealRoot, tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    for pod in LISTED_PODS:  # laid out as the kubelet would (cgroupfs driver)
        real_root.mkcg(pod)
    port = free_port()
    with FakeKubelet(PODLIST) as kubelet:
        config = kubelet_node(tmp_path, real_root.name, kubelet.url, port)
        process = AgentProcess(config, tmp_path / "agent.log")
        process.start()
        try:
            prom = prometheus([f"127.0.0.1:{port}"], scrape_configs=[shipped_job(port)],
                              rule_files=[quick_rules(tmp_path)])
            prom.wait_for_scrape()
            # the shipped relabelling ran: the agent's pod kept with its node, the other pod dropped
            targets = prom.api("targets")
            (active,) = targets["activeTargets"]
            assert {k: active["labels"][k] for k in ("job", "node", "namespace", "pod")} == {
                "job": "coloc-agent", "node": "node-a", "namespace": "coloc-system",
                "pod": "coloc-agent-x7k2p"}
            dropped = [d["discoveredLabels"]["__meta_kubernetes_pod_name"] for d in targets["droppedTargets"]]
            assert dropped == ["koordlet-abcde"]
            prom.wait_until('coloc_source_stale{source="kubelet", node="node-a"}', lambda v: v == 0, 20)
            prom.wait_until('count_over_time(up{job="coloc-agent"}[10s])', lambda v: (v or 0) >= 6, 20)
            # (the fixture's batch pods request more than this small node's batch budget: that alert may fire)
            assert prom.alerts("ColocSourceStale", "firing") == prom.alerts("ColocAgentDown", "firing") == []

            # every dashboard query runs on the real series; the main ones have data
            empty = []
            for title, expr in dashboard_queries():
                try:
                    if not prom.api("query", query=expr)["result"]:
                        empty.append(expr)
                except PrometheusError as err:
                    raise AssertionError(f"dashboard panel {title!r}: {err}") from err
            # empty here: what this node does not have (the disk guard is off, no BE quota or memory.high, no
            # HP CFS limit, nothing stale, no fetch error, no admission yet); 48 of 66 have data
            assert len(empty) <= 20, empty
            for expr in ('coloc_cpu_usage_cores{job="coloc-agent", node=~".*", scope="hp"}',
                         'max without (policy) (coloc_be_cpu_granted_cores{job="coloc-agent", node=~".*"})',
                         'rate(process_cpu_seconds_total{job="coloc-agent", node=~".*"}[5s])',
                         "histogram_quantile(0.99, sum by (node, le) "
                         '(rate(coloc_tick_duration_seconds_bucket{job="coloc-agent", node=~".*"}[5s])))'):
                assert expr not in empty, f"no data: {expr}"

            # the kubelet stops answering: the source goes stale, the alert fires
            kubelet.stop()
            alert = prom.wait_for_alert("ColocSourceStale", "firing", 30, source="kubelet", node="node-a",
                                        job="coloc-agent", severity="warning")
            summary = f"coloc-agent source kubelet on 127.0.0.1:{port} is stale"
            assert alert["annotations"]["summary"] == summary
            assert alert["annotations"]["runbook_url"] == RUNBOOKS + "colocsourcestale"

            # it answers again: the source is fresh, the alert resolves
            kubelet.start()
            prom.wait_until('coloc_source_stale{source="kubelet"}', lambda v: v == 0, 20)
            assert wait(lambda: prom.alerts("ColocSourceStale") == [], 10), prom.alerts()

            # the agent stops: its scrapes fail, ColocAgentDown fires
            assert process.stop() == 0, process.log()
            down = prom.wait_for_alert("ColocAgentDown", "firing", 30, node="node-a", severity="critical")
            assert down["annotations"]["runbook_url"] == RUNBOOKS + "colocagentdown"
        finally:
            process.stop()


def cap_cpu(root: RealRoot, rel: str, milli: int) -> None:
    """A CFS quota of `milli` milli-CPU on `rel` (per 100 ms period), as the kubelet sets a CPU limit."""
    quota = milli * 100
    if root.hierarchy.is_v1("cpu"):
        (root.path("cpu", rel) / "cpu.cfs_period_us").write_text("100000")
        (root.path("cpu", rel) / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (root.path("unified", rel) / "cpu.max").write_text(f"{quota} 100000")


@pytest.mark.cgroups
@pytest.mark.slow
def test_the_shipped_rules_fire_when_hp_is_throttled_and_suppression_has_nothing_left_to_cut(
        real_root: RealRoot, tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    """A suppression that cannot act: the guaranteed (HP) pod hits its own CPU limit while BE is already at
    its floor, so cutting batch cannot help; ColocHPThrottledWhileBESuppressed should fire."""
    for pod in LISTED_PODS:
        real_root.mkcg(pod)
    hp_pod = LISTED_PODS[1]
    cap_cpu(real_root, hp_pod, 100)
    real_root.spawn(hp_pod, workload_argv("burn"))
    port = free_port()
    with FakeKubelet(PODLIST) as kubelet:
        process = AgentProcess(kubelet_node(tmp_path, real_root.name, kubelet.url, port), tmp_path / "log")
        process.start()
        try:
            prom = prometheus([f"127.0.0.1:{port}"], scrape_configs=[shipped_job(port)],
                              rule_files=[quick_rules(tmp_path)])
            prom.wait_for_scrape()
            # the condition is real: HP runs into its quota (0.1 CPU of a burner) and BE sits at its floor
            prom.wait_until('coloc_cpu_usage_cores{scope="hp"}', lambda v: 0.05 < (v or 0) < 0.2, 20)
            prom.wait_until('max without (policy) (coloc_be_cpu_granted_cores) - coloc_be_cpu_floor_cores',
                            lambda v: v is not None and v <= 0, 20)
            prom.wait_until('coloc_cpu_throttled_ratio{scope="hp"}', lambda v: (v or 0) > 0.1, 10)
            alert = prom.wait_for_alert("ColocHPThrottledWhileBESuppressed", "firing", 20, node="node-a",
                                        scope="hp", severity="warning")
            assert alert["annotations"]["runbook_url"] == RUNBOOKS + "colochpthrottledwhilebesuppressed"
        finally:
            process.stop()
