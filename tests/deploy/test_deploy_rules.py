"""The alert rules: promtool check rules and promtool test rules pass; the PrometheusRule carries the same
groups; every alert has a unit test that fires it and one that does not; every metric it uses exists."""

from __future__ import annotations

import re
import shutil
import subprocess
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
