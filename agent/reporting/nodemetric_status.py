"""The `status` of a Koordinator NodeMetric (`slo.koordinator.sh/v1alpha1`, v1.8.0 Go types) from the
agent's own samples; and the collect policy read from its `spec.metricCollectPolicy`. No I/O.

Every usage is a `ResourceMap`: `{"resources": {"cpu": ..., "memory": ...}}`. An aggregate whose samples
cover less than half its window is an empty `{}`, as koordlet's cold-start filter writes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agent.reporting.koord_quantity import binary_bytes, go_duration, milli_cpu, parse_go_duration

MEMORY_POLICIES = ("usageWithHotPageCache", "usageWithoutPageCache", "usageWithPageCache")
AGGREGATES = (("avg", None), ("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
COVERAGE = 0.5  # koordlet's validateTimeRangeRatio


@dataclass(frozen=True, slots=True)
class CollectPolicy:
    """`spec.metricCollectPolicy` with koordlet's defaults and clamps applied (seconds)."""

    aggregate_s: float = 300.0
    report_s: float = 60.0
    durations: tuple[float, ...] = (300.0, 600.0, 1800.0)
    memory: str = "usageWithoutPageCache"


def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def collect_policy(spec: object, min_report_s: float = 30.0, min_aggregate_s: float = 60.0) -> CollectPolicy:
    """koordlet's reading of `spec`: missing fields take the defaults, the intervals are clamped from
    below, an unknown memory policy falls back to usageWithoutPageCache. ValueError names a bad field."""
    base = CollectPolicy()
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise ValueError(f"NodeMetric spec: expected an object, got {type(spec).__name__}")
    pol = spec.get("metricCollectPolicy") or {}
    where = "NodeMetric spec.metricCollectPolicy"
    if not isinstance(pol, Mapping):
        raise ValueError(f"{where}: expected an object")
    agg = pol.get("aggregateDurationSeconds")
    rep = pol.get("reportIntervalSeconds")
    aggregate_s = (
        float(_positive_int(agg, f"{where}.aggregateDurationSeconds"))
        if agg is not None
        else base.aggregate_s
    )
    report_s = (
        float(_positive_int(rep, f"{where}.reportIntervalSeconds")) if rep is not None else base.report_s
    )
    durations = base.durations
    node_agg = pol.get("nodeAggregatePolicy")
    if node_agg is not None:
        if not isinstance(node_agg, Mapping) or not isinstance(node_agg.get("durations", []), list):
            raise ValueError(f"{where}.nodeAggregatePolicy: expected an object with a 'durations' list")
        durations = tuple(
            parse_go_duration(d, f"{where}.nodeAggregatePolicy.durations[{i}]")
            for i, d in enumerate(node_agg.get("durations", []))
        )
    memory = pol.get("nodeMemoryCollectPolicy")
    memory = memory if memory in MEMORY_POLICIES else base.memory
    return CollectPolicy(
        max(aggregate_s, min_aggregate_s), max(report_s, min_report_s), durations, str(memory)
    )


@dataclass(frozen=True, slots=True)
class PodSample:
    """One pod's usage at one tick, with the class koord-manager files it under."""

    namespace: str
    name: str
    priority: str  # koord-prod | koord-mid | koord-batch | koord-free | ""
    qos: str  # LSE | LSR | LS | BE | SYSTEM | ""
    milli_cpu: float | None
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class Sample:
    """The node at one tick (wall-clock `at`): its usage, its pods', and the YARN host application's."""

    at: float
    node_milli_cpu: float | None
    node_memory_bytes: int | None
    pods: Mapping[str, PodSample] = field(default_factory=dict)
    host_milli_cpu: float | None = None  # None: no host application (no YARN) on this node
    host_memory_bytes: int | None = None

    def system(self) -> tuple[float | None, int | None]:
        """koordlet's system usage: `max(node − Σ pods − Σ host apps, 0)` per resource."""
        cpu = mem = None
        if self.node_milli_cpu is not None:
            used = sum(p.milli_cpu or 0.0 for p in self.pods.values()) + (self.host_milli_cpu or 0.0)
            cpu = max(self.node_milli_cpu - used, 0.0)
        if self.node_memory_bytes is not None:
            used_b = sum(p.memory_bytes or 0 for p in self.pods.values()) + (self.host_memory_bytes or 0)
            mem = max(self.node_memory_bytes - used_b, 0)
        return cpu, mem


def _pick(values: Sequence[float], q: float | None) -> float:
    if q is None:
        return sum(values) / len(values)
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def resource_map(cpu: float | None, mem: float | None) -> dict[str, object]:
    """A `ResourceMap`; `{}` when nothing is known."""
    res: dict[str, str] = {}
    if cpu is not None:
        res["cpu"] = milli_cpu(int(cpu))
    if mem is not None:
        res["memory"] = binary_bytes(int(mem))
    return {"resources": res} if res else {}


def _window(samples: Sequence[Sample], now: float, span: float) -> list[Sample]:
    return [s for s in samples if now - span <= s.at <= now]


def _covered(window: Sequence[Sample], now: float, span: float) -> bool:
    return bool(window) and now - min(s.at for s in window) >= COVERAGE * span


def _avg_map(pairs: Sequence[tuple[float | None, float | None]]) -> dict[str, object]:
    cpus = [c for c, _ in pairs if c is not None]
    mems = [m for _, m in pairs if m is not None]
    return resource_map(_pick(cpus, None) if cpus else None, _pick(mems, None) if mems else None)


def _aggregated(
    samples: Sequence[Sample], now: float, spans: Sequence[float], value: str
) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for span in spans:
        window = _window(samples, now, span)
        usage: dict[str, object] = {}
        for key, q in AGGREGATES:
            if not _covered(window, now, span):
                usage[key] = {}
                continue
            pairs = [
                (s.node_milli_cpu, s.node_memory_bytes) if value == "node" else s.system() for s in window
            ]
            cpus = [c for c, _ in pairs if c is not None]
            mems = [float(m) for _, m in pairs if m is not None]
            usage[key] = resource_map(_pick(cpus, q) if cpus else None, _pick(mems, q) if mems else None)
        out.append({"duration": go_duration(span), "usage": usage})
    return out


def _pods(window: Sequence[Sample]) -> list[dict[str, object]]:
    by_key: dict[str, list[PodSample]] = {}
    for s in window:
        for key, p in s.pods.items():
            by_key.setdefault(key, []).append(p)
    out: list[dict[str, object]] = []
    for key in sorted(by_key):
        seen = by_key[key]
        last = seen[-1]
        usage = _avg_map([(p.milli_cpu, p.memory_bytes) for p in seen])
        if not usage:
            continue
        out.append(
            {
                "namespace": last.namespace,
                "name": last.name,
                "podUsage": usage,
                "priority": last.priority,
                "qos": last.qos,
            }
        )
    return out


def rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(int(wall), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_status(
    samples: Sequence[Sample], policy: CollectPolicy, now: float, host_app: str = "hadoop-yarn"
) -> dict[str, object] | None:
    """The whole `status` (it replaces the old one); None when no sample lies in the aggregate window."""
    window = _window(samples, now, policy.aggregate_s)
    if not window:
        return None
    node_info: dict[str, object] = {
        "nodeUsage": _avg_map([(s.node_milli_cpu, s.node_memory_bytes) for s in window]),
        "systemUsage": _avg_map([s.system() for s in window]),
        "aggregatedNodeUsages": _aggregated(samples, now, policy.durations, "node"),
        "aggregatedSystemUsages": _aggregated(samples, now, policy.durations, "system"),
    }
    status: dict[str, object] = {
        "updateTime": rfc3339(now),
        "nodeMetric": node_info,
        "podsMetric": _pods(window),
    }
    hosts = [(s.host_milli_cpu, s.host_memory_bytes) for s in window if s.host_milli_cpu is not None]
    if hosts:
        status["hostApplicationMetric"] = [
            {"name": host_app, "usage": _avg_map(hosts), "priority": "koord-batch", "qos": "BE"}
        ]
    return status
