"""Memory QoS and CPU burst in /metrics (`ResourceQosMetrics`, labelled as the batch limits' series) and in
`top`, which reads them back from that text (issue 26's "visible"). The executor's state is set as a pass
leaves it; the real cgroup writes are tests/memqos' (the v2 guest's)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from agent.cli.top import MetricsView, render
from agent.daemon.resource_qos import ResourceQosMetrics
from agent.executors.resource_qos import ResourceQosExecutor
from agent.sources.nodeslo_map import NODESLO, YAML, ResourceQos
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosSettings, MemoryValues

MI = 1 << 20
POD, CTR = "burstable/podu2", "burstable/podu2/c2"
OFF_POD = "burstable/podu3"  # a class turned off: 0 / "max" in place, not shown


def _exposition() -> str:
    ex = ResourceQosExecutor(None)  # type: ignore[arg-type]  # nothing is written here
    values = (MemoryValues(POD, 160 * MI, 256 * MI), MemoryValues(CTR, 128 * MI, 204 * MI, 486 * MI, True))
    ex.memory_pods = {"shop/web": values, "shop/off": (MemoryValues(OFF_POD, 0, 0),)}
    ex.memory = {v.rel: v for v in (*values, MemoryValues(OFF_POD, 0, 0))}
    ex.burst_pods = {"shop/web": ((POD, 75_000), (CTR, 50_000))}
    ex.burst = {POD: 75_000}  # the container's burst is not in place (its write failed): not shown
    ex.writes = 7
    runner = SimpleNamespace(executor=ex, last=ResourceQos(MemoryQosSettings(), CpuBurstSettings(),
                                                           NODESLO, YAML))
    registry = CollectorRegistry()
    registry.register(ResourceQosMetrics(runner))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_metrics_carry_memory_qos_and_burst_per_pod_and_container_with_their_source() -> None:
    view = MetricsView.parse(_exposition())
    assert view.value("coloc_memory_qos_min_bytes", pod="shop/web", level="pod", cgroup=POD,
                      source=NODESLO) == 160 * MI
    assert view.value("coloc_memory_qos_low_bytes", pod="shop/web", level="container", cgroup=CTR,
                      source=NODESLO) == 204 * MI
    assert view.value("coloc_memory_qos_high_bytes", pod="shop/web", level="container", cgroup=CTR,
                      source=NODESLO) == 486 * MI
    assert [lab for lab, _ in view.series("coloc_memory_qos_high_bytes")] == [
        {"pod": "shop/web", "level": "container", "cgroup": CTR, "source": NODESLO}]  # no pod-level high
    assert view.series("coloc_cpu_burst_us") == [
        ({"pod": "shop/web", "level": "pod", "cgroup": POD, "source": YAML}, 75_000.0)]
    assert not [lab for lab, _ in view.series("coloc_memory_qos_min_bytes") if lab["pod"] == "shop/off"]
    assert view.value("coloc_resource_qos_writes_total") == 7


def test_top_lists_memory_qos_and_burst_per_pod_and_container() -> None:
    text = render(MetricsView.parse(_exposition()), "http://x/metrics", now=0.0, api="not asked")
    lines = text.splitlines()
    start = lines.index("memory QoS and CPU burst")
    assert lines[start + 1].split() == ["POD", "/", "CONTAINER", "LEVEL", "MIN", "LOW", "HIGH", "BURST",
                                        "MEMORY", "FROM", "BURST", "FROM"]
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line.split())
    assert rows == [
        ["shop/web", "container", "128.0Mi", "204.0Mi", "486.0Mi", "-", "NodeSLO", "-"],
        ["shop/web", "pod", "160.0Mi", "256.0Mi", "-", "75ms", "NodeSLO", "yaml"],
    ]


def test_top_has_no_memory_qos_section_when_none_is_held() -> None:
    out = render(MetricsView.parse("coloc_ticks_total 3\n"), "http://x/metrics", now=0.0, api="not asked")
    assert "memory QoS" not in out
