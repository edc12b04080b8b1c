"""NodeMetric status from the agent's ticks, written through the status subresource of a local fake API
server (a real one cannot run here) that checks `resourceVersion` and validates against the vendored
Koordinator v1.8.0 CRD schema; the test checks the same schema itself, and rejects keys it does not name."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.apiserver import FakeApiServer, schema_errors
from kit.snapshot import node_snapshot, published
from kubernetes import client

from agent.config.sources import KubeApiConfig, NodeMetricConfig
from agent.published import Published
from agent.reporting.koord_quantity import binary_bytes, milli_cpu, parse_go_duration
from agent.reporting.nodemetric import MetricOutcome, NodeMetricReporter
from agent.reporting.nodemetric_status import collect_policy
from agent.sources.kubeapi import make_api_client
from agent.sources.result import PodInfo
from qos.model import Resources, Source, Tier, Usage, Workload

FIX = Path(__file__).resolve().parent.parent / "fixtures"
GIB = 1 << 30
NM = {
    "apiVersion": "slo.koordinator.sh/v1alpha1",
    "kind": "NodeMetric",
    "metadata": {
        "name": "node-a",
        "uid": "9f0e-1",
        "resourceVersion": "77",
        "generation": 1,
        "creationTimestamp": "2024-05-01T00:00:00Z",
    },
    "spec": {
        "metricCollectPolicy": {
            "aggregateDurationSeconds": 60,
            "reportIntervalSeconds": 30,
            "nodeAggregatePolicy": {"durations": ["1m0s", "1h0m0s"]},
            "nodeMemoryCollectPolicy": "usageWithoutPageCache",
        }
    },
}
UID = "0a1b2c3d-0000-4000-8000-0000000000c1"
WALL = 1_700_000_000.0  # the wall clock the reporter reads, moved by hand


@pytest.fixture
def api(api: FakeApiServer) -> FakeApiServer:
    """The Node's API server (tests/conftest.py) with koord-manager's NodeMetric for it."""
    api.koord[("nodemetrics", "node-a")] = copy.deepcopy(NM)
    return api


def _pub(at: float, stale: dict[str, str] | None = None) -> Published:
    pod = Workload(
        f"k8s/{UID}",
        "spark-exec-1",
        Source.K8S,
        Tier.BESTEFFORT,
        True,
        3500,
        "besteffort/p",
        Resources(1000, GIB),
        usage=Usage(700.0, GIB),
        namespace="batch",
    )
    yarn = Workload(
        "yarn/c1",
        "c1",
        Source.YARN,
        Tier.BESTEFFORT,
        True,
        5000,
        "besteffort/hadoop-yarn/c1",
        Resources(1000, GIB),
        usage=Usage(300.0, GIB // 2),
    )
    snap = node_snapshot((pod, yarn), taken_at=at, node=Usage(2500.0, 6 * GIB), stale=stale or {})
    return published(snap, tick_started_at=at, tick_monotonic=at, be_cpu_policy="")


def _info() -> PodInfo:
    return PodInfo(
        uid=UID,
        namespace="batch",
        name="spark-exec-1",
        phase="Running",
        qos_class="BestEffort",
        koord_qos=None,
        priority_class="",
        host_network=False,
        pod_ips=(),
        container_ids=(),
        labels={"koordinator.sh/priority-class": "koord-free"},
        batch_requests=Resources(),
        limits=Resources(),
    )


def _reporter(api: FakeApiServer, wall: FakeClock) -> NodeMetricReporter:
    conf = client.Configuration()
    conf.host = api.url
    return NodeMetricReporter(
        NodeMetricConfig(enabled=True),
        make_api_client(KubeApiConfig(), conf),
        "node-a",
        lambda: (_info(),),
        wall=wall,
    )


def test_status_written_schema_valid_with_every_part(api: FakeApiServer) -> None:
    wall = FakeClock(WALL)
    rep = _reporter(api, wall)
    start = wall.now
    for i in range(45):  # 45 s of ticks: the 1 m window is covered over half, the 1 h one is not
        wall.now = start + i
        rep.observe(_pub(wall.now))
    assert rep.age_s() is None
    assert rep.sync() is MetricOutcome.WRITTEN
    assert rep.age_s() is not None and rep.policy.report_s == 30
    stored = api.koord[("nodemetrics", "node-a")]
    assert schema_errors("nodemetrics", stored) == []
    assert stored["spec"] == NM["spec"], "the status subresource leaves the spec alone"
    st = stored["status"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", st["updateTime"])
    node = st["nodeMetric"]
    assert node["nodeUsage"] == {"resources": {"cpu": "2500m", "memory": "6Gi"}}
    # system = node − pods − host apps = 2500 − 700 − 300 m, 6 − 1 − 0.5 GiB
    assert node["systemUsage"] == {"resources": {"cpu": "1500m", "memory": "4608Mi"}}
    one_minute, one_hour = node["aggregatedNodeUsages"]
    assert one_minute["duration"] == "1m0s" and set(one_minute["usage"]) == {
        "avg",
        "p50",
        "p90",
        "p95",
        "p99",
    }
    assert one_minute["usage"]["p99"] == {"resources": {"cpu": "2500m", "memory": "6Gi"}}
    assert one_hour["duration"] == "1h0m0s" and all(v == {} for v in one_hour["usage"].values())
    assert st["podsMetric"] == [
        {
            "namespace": "batch",
            "name": "spark-exec-1",
            "priority": "koord-free",
            "qos": "BE",
            "podUsage": {"resources": {"cpu": "700m", "memory": "1Gi"}},
        }
    ]
    assert st["hostApplicationMetric"] == [
        {
            "name": "hadoop-yarn",
            "priority": "koord-batch",
            "qos": "BE",
            "usage": {"resources": {"cpu": "300m", "memory": "512Mi"}},
        }
    ]


def test_a_conflict_is_retried(api: FakeApiServer) -> None:
    wall = FakeClock(WALL)
    rep = _reporter(api, wall)
    rep.observe(_pub(wall.now))
    orig = api._koord
    bumped = []

    def race(rec, plural, name, sub):  # type: ignore[no-untyped-def]
        if sub and not bumped:  # koord-manager updates the spec between our GET and our PUT
            bumped.append(1)
            api.bump(api.koord[("nodemetrics", "node-a")])
        return orig(rec, plural, name, sub)

    api._koord = race  # type: ignore[method-assign]
    assert rep.sync() is MetricOutcome.WRITTEN
    assert api.conflicts == 1 and len(api.status_puts) == 1


def test_stale_collection_writes_nothing(api: FakeApiServer) -> None:
    wall = FakeClock(WALL)
    rep = _reporter(api, wall)
    rep.observe(_pub(wall.now, stale={"kubelet": "no answer for 40s"}))
    assert rep.sync() is MetricOutcome.STALE and api.status_puts == []
    rep.observe(_pub(wall.now + 2))
    wall.now += 100  # the loop stopped publishing: old usage must not get a fresh updateTime
    assert rep.sync() is MetricOutcome.STALE and api.status_puts == [] and rep.age_s() is None


def test_no_object_is_skipped_never_created(api: FakeApiServer) -> None:
    del api.koord[("nodemetrics", "node-a")]
    wall = FakeClock(WALL)
    rep = _reporter(api, wall)
    rep.observe(_pub(wall.now))
    assert rep.sync() is MetricOutcome.ABSENT and api.koord == {}


def test_unknown_keys_are_caught_by_the_check() -> None:
    bad = copy.deepcopy(NM)
    bad["status"] = {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "1"}, "cpu": "1"}}}
    assert any("unknown field" in e for e in schema_errors("nodemetrics", bad))


@pytest.mark.parametrize(("milli", "text"), [(1500, "1500m"), (2000, "2"), (12_000_000, "12k"), (0, "0")])
def test_cpu_quantities_as_go_writes_them(milli: int, text: str) -> None:
    assert milli_cpu(milli) == text


@pytest.mark.parametrize(
    ("n", "text"), [(2 * GIB, "2Gi"), (1536 << 20, "1536Mi"), (1000001, "1000001"), (1000, "1k")]
)
def test_memory_quantities_as_go_writes_them(n: int, text: str) -> None:
    assert binary_bytes(n) == text


def test_collect_policy_defaults_clamps_and_errors() -> None:
    assert collect_policy(None).durations == (300.0, 600.0, 1800.0)
    p = collect_policy({"metricCollectPolicy": {"reportIntervalSeconds": 5, "aggregateDurationSeconds": 10}})
    assert (p.report_s, p.aggregate_s) == (30.0, 60.0)
    assert parse_go_duration("1h30m0s", "x") == 5400
    with pytest.raises(ValueError, match="durations\\[0\\]"):
        collect_policy({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["soon"]}}})
