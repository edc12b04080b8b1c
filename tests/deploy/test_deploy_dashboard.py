"""The Grafana dashboard (deploy/grafana): the checked-in JSON is what its generator (grafana-foundation-sdk)
makes, every query reads only metric families the agent exports, it covers what an operator looks for, and
the kustomize component ships it as a ConfigMap Grafana's sidecar picks up."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from types import ModuleType

import pytest
from deploy_render import DEPLOY, needs_kubectl, one, rendered_with
from promql_names import (
    DASHBOARD,
    dashboard,
    dashboard_queries,
    documented_families,
    metric_names,
    series_names,
)

GENERATOR = DEPLOY / "grafana" / "dashboard.py"
PROMETHEUS_OWN = {"up"}  # the scrape's own series, not the agent's


def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk")
    spec = importlib.util.spec_from_file_location("coloc_dashboard", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_json_is_what_the_generator_makes() -> None:
    assert DASHBOARD.read_text() == generator().render(), (
        "deploy/grafana/coloc-agent.json is stale: python deploy/grafana/dashboard.py > "
        "deploy/grafana/coloc-agent.json")


def test_every_query_reads_only_families_the_agent_exports() -> None:
    exported = series_names(documented_families()) | PROMETHEUS_OWN
    queries = dashboard_queries()
    assert len(queries) >= 40
    for title, expr in queries:
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= exported, f"{title}: {sorted(names - exported)} not exported (docs/metrics.md)"


def test_the_name_check_catches_a_misspelt_family() -> None:
    exported = series_names(documented_families())
    assert metric_names('rate(coloc_evictions_totl{job="coloc-agent"}[5m])') - exported == {
        "coloc_evictions_totl"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(coloc_tick_duration_seconds_bucket"
                        "[5m])))") <= exported


def test_every_query_selects_the_job_and_the_node_variable() -> None:
    for title, expr in dashboard_queries():
        if title.startswith("variable "):
            continue
        for selector in re.findall(r"\b\w+\{([^}]*)\}", expr):
            assert 'job="coloc-agent"' in selector and 'node=~"$node"' in selector, (title, expr)


def test_the_dashboard_covers_what_an_operator_looks_for() -> None:
    doc = dashboard()
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "BE budget against HP use", "Suppression and its reaction", "Evictions",
                    "Batch ledger and admission", "Disk guard", "Sources", "The agent's own cost"]
    used = set().union(*(metric_names(e) for _, e in dashboard_queries(doc)))
    io_families = {n for n in documented_families() if n.startswith("coloc_io_")}
    assert io_families <= used, f"disk guard figures not shown: {sorted(io_families - used)}"
    for family in ("coloc_be_cpu_granted_cores", "coloc_cpu_usage_cores", "coloc_evictions_total",
                   "coloc_batch_origin_cpu_cores", "coloc_admissions_refused_total", "coloc_ledger_revision",
                   "process_cpu_seconds_total", "process_resident_memory_bytes",
                   "coloc_tick_duration_seconds_bucket", "coloc_source_stale"):
        assert family in used, family
    titles = [p["title"] for p in doc["panels"]]
    assert len(titles) == len(set(titles)), "panel titles must be unique"
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
    names = [v["name"] for v in doc["templating"]["list"]]
    assert names == ["datasource", "node"]


@needs_kubectl
def test_the_grafana_component_ships_the_dashboard_as_a_sidecar_configmap() -> None:
    objects = rendered_with("koordinator", "grafana")
    (cm,) = [o for o in objects
             if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "coloc-agent-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == one("koordinator", "DaemonSet")["metadata"]["namespace"]
    assert json.loads(cm["data"]["coloc-agent.json"]) == dashboard()
