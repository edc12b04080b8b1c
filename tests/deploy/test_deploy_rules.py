"""The alert rules: promtool check rules and promtool test rules pass; the PrometheusRule carries the same
groups; every alert has a unit test that fires it and one that does not; every metric it uses exists; every
alert has a runbook in docs/runbooks.md. The plain scrape config passes promtool and matches the
PodMonitor."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kit.snapshot import node_snapshot, published
from prometheus_client import generate_latest

from agent.metrics import LedgerFigures, MetricsConfig, MetricsHub
from agent.published import Board
from qos.model import BeTierState, Resources, Usage

PROM = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROM / "rules" / "coloc-agent.rules.yml"
TESTS = PROM / "rules" / "coloc-agent.rules.test.yml"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def alerts() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@needs_promtool
def test_promtool_check_rules_passes_on_both_files(tmp_path: Path) -> None:
    (rule,) = yaml.safe_load_all((PROM / "prometheusrule.yaml").read_text())
    extracted = tmp_path / "from-prometheusrule.yml"
    extracted.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    for path in (RULES, extracted):
        proc = promtool("check", "rules", str(path), cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout


@needs_promtool
def test_promtool_test_rules_passes() -> None:
    proc = promtool("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_prometheusrule_has_exactly_the_groups_of_the_rules_file() -> None:
    (rule,) = yaml.safe_load_all((PROM / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    names = {a["alert"] for a in alerts()}
    assert {
        "ColocAgentDown",
        "ColocLoopStalled",
        "ColocSourceStale",
        "ColocBatchOvercommitted",
        "ColocEvictionStorm",
        "ColocHPThrottledWhileBESuppressed",
    } <= names
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert names == fires == quiet
    for a in alerts():
        assert a["labels"]["severity"] in {"critical", "warning", "info"}
        assert a["annotations"]["summary"] and a["annotations"]["description"]


def test_every_metric_the_rules_use_is_exported_by_the_agent() -> None:
    board = Board()
    snap = node_snapshot(capacity=Resources(2000, 1 << 30), cpus=(0, 1), node=Usage(1000.0, 1),
                         hp=Usage(500.0, 1, 0.0), be=Usage(0.0, 0), system=Usage(0.0, 0),
                         be_tier=BeTierState(cpuset=(1,)), stale={"kubelet": "timeout"})
    board.publish(published(snap, tick_started_at=0.0, tick_monotonic=0.0, be_cpu_granted_milli=1000,
                            source_age_s={"kubelet": 9.0}, be_cpu_floor_milli=1000))
    hub = MetricsHub(MetricsConfig(port=0))
    hub.attach(board, ledger_view=lambda: LedgerFigures(batch_origin=Resources(1000, 1 << 30)))
    exported = set(re.findall(r"^(\w+)", generate_latest(hub.registry).decode(), flags=re.M))
    used = {m for a in alerts() for m in re.findall(r"\b(coloc_\w+|up)\b", a["expr"])}
    assert used - exported - {"up"} == set()


# -- runbooks ------------------------------------------------------------------------------------------------

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Anchor of each `## ` section of docs/runbooks.md -> its text."""
    parts = re.split(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.M)
    return {github_anchor(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_alert_has_a_runbook_url_to_its_own_section_of_docs_runbooks() -> None:
    with PYPROJECT.open("rb") as f:
        source = tomllib.load(f)["project"]["urls"]["Source"]
    base = f"{source}/blob/main/docs/runbooks.md#"
    sections = runbook_sections()
    anchors = []
    for a in alerts():
        url = a["annotations"].get("runbook_url", "")
        assert url.startswith(base), f"{a['alert']}: runbook_url {url!r} is not into {base}"
        anchor = url.removeprefix(base)
        assert anchor == github_anchor(a["alert"]), f"{a['alert']}: anchor {anchor!r}"
        assert anchor in sections, f"{a['alert']}: docs/runbooks.md has no section #{anchor}"
        text = sections[anchor]
        for part in ("**Means.**", "**Check.**", "**Do.**"):
            assert part in text, f"{a['alert']}: its runbook lacks {part}"
        anchors.append(anchor)
    assert sorted(anchors) == sorted(sections), "a runbook section without an alert, or two alerts on one"


# -- the plain scrape config -------------------------------------------------------------------------------

SCRAPE = PROM / "scrape" / "coloc-agent.scrape.yml"


def scrape_job() -> dict[str, Any]:
    (job,) = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    assert isinstance(job, dict)
    return job


@needs_promtool
def test_promtool_checks_the_scrape_config_with_the_rules(tmp_path: Path) -> None:
    # Debian builds Prometheus without the Kubernetes service discovery: the check runs on the job with its
    # kubernetes_sd_configs swapped for a static target (its relabelling, interval and path as shipped).
    job = {k: v for k, v in scrape_job().items() if k != "kubernetes_sd_configs"}
    job["static_configs"] = [{"targets": ["127.0.0.1:19316"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "scrape_configs": [job]}))
    proc = promtool("check", "config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_scrape_config_selects_what_the_podmonitor_selects() -> None:
    (pm,) = yaml.safe_load_all((PROM / "podmonitor.yaml").read_text())
    job = scrape_job()
    assert job["job_name"] == pm["spec"]["selector"]["matchLabels"][pm["spec"]["jobLabel"]] == "coloc-agent"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == pm["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    relabel = {tuple(r["source_labels"]): r for r in job["relabel_configs"]}
    label = "__meta_kubernetes_pod_label_" + re.sub(r"[^\w]", "_", pm["spec"]["jobLabel"])
    assert relabel[(label,)] == {"source_labels": [label], "regex": "coloc-agent", "action": "keep"}
    port = ("__meta_kubernetes_pod_container_port_name",)
    assert relabel[port]["regex"] == endpoint["port"] and relabel[port]["action"] == "keep"
    assert relabel[("__meta_kubernetes_pod_node_name",)]["target_label"] == "node"
    assert (job["metrics_path"], job["scrape_interval"]) == (endpoint["path"], endpoint["interval"])
