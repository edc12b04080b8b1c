"""Pod eviction through the official Kubernetes client against a local fake API server (a real one cannot
run here) that checks what the real one checks — a policy/v1 Eviction naming the pod, the UID precondition,
JSON content type, a valid Event — and answers 201, 429, 404, 409 and 500 with Status bodies."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.tls import TlsFiles
from kubernetes import client

from agent.config.sources import KubeApiConfig
from agent.executors.k8s_eviction import EvictionOutcome, K8sEvictor
from agent.sources.kubeapi import make_api_client
from agent.sources.kubelet import parse_pod_list
from cgroups.layout import Layout
from qos.actions import Evict, EvictReason
from qos.model import Workload

FIX = Path(__file__).resolve().parent.parent / "fixtures"
NUMBERS = {"overcommit_milli_cpu": 3000.0, "origin_milli_cpu": 8000.0}


@pytest.fixture
def pods() -> dict[str, Workload]:
    parsed, _ = parse_pod_list(
        json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text()), Layout("cgroupfs")
    )
    return {p.info.name: p.workload for p in parsed}


@pytest.fixture
def api(pods: dict[str, Workload], tls_files: TlsFiles) -> Iterator[FakeApiServer]:
    known = {(w.namespace, w.name): w.key.removeprefix("k8s/") for w in pods.values()}
    server = FakeApiServer(FIX / "apiserver" / "node.json", known, tls=(tls_files.cert, tls_files.key))
    with server:
        yield server


def _evictor(api: FakeApiServer, tls: TlsFiles, clock: FakeClock, **kw: object) -> K8sEvictor:
    conf = client.Configuration()
    conf.host = api.url
    conf.ssl_ca_cert = tls.ca
    cfg = KubeApiConfig(timeout_s=2.0, evicted_memory_s=120, **kw)  # type: ignore[arg-type]
    return K8sEvictor(cfg, make_api_client(cfg, conf), "node-a", clock=clock)


def _evictions(api: FakeApiServer) -> list:  # type: ignore[type-arg]
    return api.seen("POST", "/api/v1/namespaces/batch/pods/")


def test_evicted_with_uid_precondition_and_a_warning_event(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    ev = _evictor(api, tls_files, clock)
    spark = pods["spark-exec-1"]
    r = ev.evict_pod(spark, "batch_overcommit", "batch overcommitted by 3000m CPU", NUMBERS)
    assert (r.outcome, r.ok, r.try_next, r.status) == (EvictionOutcome.EVICTED, True, False, 201)
    uid = spark.key.removeprefix("k8s/")
    assert api.evicted == [("batch", "spark-exec-1", uid)]
    (post,) = _evictions(api)
    assert post.path == "/api/v1/namespaces/batch/pods/spark-exec-1/eviction"
    assert post.headers["content-type"] == "application/json"
    body = post.json()
    assert (body["apiVersion"], body["kind"]) == ("policy/v1", "Eviction")
    assert body["metadata"] == {"name": "spark-exec-1", "namespace": "batch"}
    assert body["deleteOptions"]["preconditions"] == {"uid": uid}
    (event,) = api.events
    assert (event["type"], event["reason"]) == ("Warning", "Evicted")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "spark-exec-1",
        "namespace": "batch",
        "uid": uid,
    }
    assert event["source"] == {"component": "coloc-agent", "host": "node-a"}
    assert "batch_overcommit" in event["message"] and "overcommit_milli_cpu=3000" in event["message"]
    assert "origin_milli_cpu=8000" in event["message"]


def test_an_evicted_uid_is_not_evicted_again_within_the_window(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    ev = _evictor(api, tls_files, clock)
    spark = pods["spark-exec-1"]
    assert ev.evict_pod(spark, "memory_pressure", "m").outcome is EvictionOutcome.EVICTED
    clock.advance(60)
    again = ev.evict_pod(spark, "memory_pressure", "m")
    assert again.outcome is EvictionOutcome.ALREADY_EVICTED and again.ok and not again.try_next
    assert len(_evictions(api)) == 1  # nothing sent
    clock.advance(61)
    late = ev.evict_pod(spark, "memory_pressure", "m")
    assert late.outcome is EvictionOutcome.GONE and late.ok  # sent again; the pod is gone by now
    assert len(_evictions(api)) == 2


def test_429_disruption_budget_moves_to_the_next_victim(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    ev = _evictor(api, tls_files, clock)
    spark = pods["spark-exec-1"]
    api.script[("batch", "spark-exec-1")] = [429]
    r = ev.evict_pod(spark, "cpu_satisfaction", "BE starved", {"satisfaction_percent": 30.0})
    assert (r.outcome, r.ok, r.try_next, r.status) == (EvictionOutcome.BLOCKED, False, True, 429)
    assert "disruption budget" in r.detail
    (event,) = api.events
    assert event["reason"] == "EvictionBlocked" and "satisfaction_percent=30" in event["message"]
    # Not remembered as evicted: the next round may try again, and then it goes through.
    assert ev.evict_pod(spark, "cpu_satisfaction", "BE starved").outcome is EvictionOutcome.EVICTED


def test_404_is_already_gone(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    del api.pods[("batch", "spark-exec-1")]
    r = _evictor(api, tls_files, clock).evict_pod(pods["spark-exec-1"], "memory_pressure", "m")
    assert (r.outcome, r.ok, r.status) == (EvictionOutcome.GONE, True, 404)
    assert api.events == []


def test_409_when_the_uid_belongs_to_a_different_pod(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    api.pods[("batch", "spark-exec-1")] = (
        "0a1b2c3d-0000-4000-8000-0000000000ee"  # recreated under the same name
    )
    r = _evictor(api, tls_files, clock).evict_pod(pods["spark-exec-1"], "memory_pressure", "m")
    assert (r.outcome, r.ok, r.try_next, r.status) == (EvictionOutcome.CONFLICT, False, True, 409)
    assert "Precondition failed" in r.detail and api.evicted == []


def test_500_fails_without_an_event(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    api.script[("batch", "spark-exec-1")] = [500]
    r = _evictor(api, tls_files, clock).evict_pod(pods["spark-exec-1"], "memory_pressure", "m")
    assert (r.outcome, r.ok, r.try_next, r.status) == (EvictionOutcome.FAILED, False, False, 500)
    assert "etcdserver" in r.detail and api.events == [] and api.evicted == []


def test_a_pod_that_is_not_be_is_never_evicted_unless_opted_in(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    web = pods["web-7d9f8c-x2x9z"]
    assert not web.be
    r = _evictor(api, tls_files, clock).evict_pod(web, "memory_pressure", "m")
    assert r.outcome is EvictionOutcome.REFUSED and "is not BE" in r.detail
    assert api.requests == []  # nothing was sent
    opted = _evictor(api, tls_files, clock, evict_non_be=True).evict_pod(web, "memory_pressure", "m")
    assert opted.outcome is EvictionOutcome.EVICTED
    assert api.seen("POST")[0].path == "/api/v1/namespaces/shop/pods/web-7d9f8c-x2x9z/eviction"


@pytest.mark.parametrize(
    "change",
    [
        {"key": "k8s/../../nodes/node-a"},
        {"key": "k8s/0A1B2C3D-0000-4000-8000-000000000001"},
        {"name": "../node-a"},
        {"namespace": "batch/../kube-system"},
        {"key": "yarn/container_1_0001_01_000001"},
    ],
)
def test_hostile_workloads_are_refused_before_any_request(
    api: FakeApiServer,
    tls_files: TlsFiles,
    clock: FakeClock,
    pods: dict[str, Workload],
    change: dict[str, str],
) -> None:
    bad = dataclasses.replace(pods["spark-exec-1"], **change)  # type: ignore[arg-type]
    r = _evictor(api, tls_files, clock).evict_pod(bad, "memory_pressure", "m")
    assert r.outcome is EvictionOutcome.REFUSED and r.detail
    assert api.requests == []


def test_api_server_down_is_a_failure_not_a_crash(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    ev = _evictor(api, tls_files, clock)
    api.stop()
    started = time.monotonic()
    r = ev.evict_pod(pods["spark-exec-1"], "memory_pressure", "m")
    assert r.outcome is EvictionOutcome.FAILED and "unreachable" in r.detail
    assert time.monotonic() - started < 10


async def test_the_executor_protocol(
    api: FakeApiServer, tls_files: TlsFiles, clock: FakeClock, pods: dict[str, Workload]
) -> None:
    ev = _evictor(api, tls_files, clock)
    spark = pods["spark-exec-1"]
    api.script[("batch", "spark-exec-1")] = [429]
    action = Evict(spark.key, EvictReason.BATCH_OVERCOMMIT, "over by 3000m", 2000, 4 << 30, NUMBERS)
    blocked = await ev.evict(spark, action)
    assert (blocked.ok, blocked.try_next) == (False, True)
    done = await ev.evict(spark, action)
    assert done.ok and done.detail.startswith("evicted")
    assert "batch_overcommit: over by 3000m" in api.events[-1]["message"]
