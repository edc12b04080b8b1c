"""The metric names a PromQL expression reads, and the metric families the agent documents (docs/metrics.md,
which tests/metrics/test_metrics_docs.py keeps equal to what the agent exports)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO / "docs" / "metrics.md"
DASHBOARD = REPO / "deploy" / "grafana" / "coloc-agent.json"

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """Names of the series `expr` selects: label matchers, grouping label lists, ranges, strings, Grafana
    variables, functions and keywords taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'", '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\w+", " ", text)
    return {m for m in _IDENT.findall(text) if m.lower() not in _KEYWORDS}


def documented_families() -> dict[str, str]:
    """Every `coloc_` family of docs/metrics.md's tables -> its type; the `process_*` row's names (gauge or
    counter, as prometheus-client exports them)."""
    text = METRICS_DOC.read_text()
    out = dict(re.findall(r"^\| `(coloc_\w+)` \| (\w+) \|", text, flags=re.M))
    (process_row,) = [ln for ln in text.splitlines() if ln.startswith("| `process_*` |")]
    for name in re.findall(r"`(process_\w+)`", process_row):
        out[name] = "counter" if name.endswith("_total") else "gauge"
    return out


def series_names(families: dict[str, str]) -> set[str]:
    """The series names the families expose: a histogram's `_bucket`, `_sum`, `_count` beside the rest."""
    out = set()
    for name, kind in families.items():
        if kind == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            out.add(name)
    return out


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def dashboard_queries(doc: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target, and of every query variable."""
    doc = dashboard() if doc is None else doc
    out = [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets") or []]
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["query"])
            assert m, var["query"]
            out.append((f"variable {var['name']}", m.group(1)))
    return out
