"""`top` shows each BE pod's and container's batch limits and each YARN container's, from /metrics (issue 26).

The /metrics text is what `BatchLimitsMetrics` exposes (names and labels as agent/daemon/batch_limits.py
writes them); a test beside the controller checks those series against real cgroups."""

from __future__ import annotations

from agent.cli.top import MetricsView, render

POD = 'pod="batch/spark-1",level="pod",cgroup="besteffort/podu1",source="spec"'
CONTAINER = 'pod="batch/spark-1",level="container",cgroup="besteffort/podu1/c1",source="spec"'
YARN = 'container="container_e17_1700000000000_0001_01_000002"'
EXPOSITION = f"""\
coloc_ticks_total 3
coloc_batch_limits_on_creation 1
coloc_batch_limit_cpu_shares{{{POD}}} 512
coloc_batch_limit_cpu_cores{{{POD}}} 1
coloc_batch_limit_memory_bytes{{{POD}}} 536870912
coloc_batch_limit_cpu_shares{{{CONTAINER}}} 512
coloc_batch_limit_cpu_cores{{{CONTAINER}}} -1
coloc_batch_limit_memory_bytes{{{CONTAINER}}} -1
coloc_yarn_limit_memory_bytes{{{YARN}}} 268435456
coloc_yarn_limit_cpu_cores{{{YARN}}} -1
"""


def _section(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("batch limits")))
    assert lines[start] == "batch limits  (placed at creation)"
    assert lines[start + 1].split() == ["POD", "/", "CONTAINER", "LEVEL", "CPU", "SHARES", "MEMORY", "SOURCE"]
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_top_lists_enforced_batch_limits_per_pod_container_and_yarn_container() -> None:
    rows = _section(render(MetricsView.parse(EXPOSITION), "http://x/metrics", now=0.0, api="not asked"))
    assert rows == [
        ["batch/spark-1", "container", "unlimited", "512", "unlimited", "spec"],
        ["batch/spark-1", "pod", "1.00", "512", "512.0Mi", "spec"],
        ["container_e17_1700000000000_0001_01_000002", "yarn", "unlimited", "-", "256.0Mi", "nodemanager"],
    ]


def test_top_has_no_batch_limits_section_when_none_are_enforced() -> None:
    out = render(MetricsView.parse("coloc_ticks_total 3\n"), "http://x/metrics", now=0.0, api="not asked")
    assert "batch limits" not in out
