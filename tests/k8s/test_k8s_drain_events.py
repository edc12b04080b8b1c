"""Decommission notices on Kubernetes pods: a Warning Event per BE pod naming the absolute deadline, posted
once per deadline. Against the local fake API server, which checks the Event as the real one would."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.fakes.apiserver import FakeApiServer
from kit.fakes.tls import TlsFiles
from kit.snapshot import node_snapshot
from kubernetes import client

from agent.config.sources import KubeApiConfig
from agent.decommission.controller import request_drain
from agent.decommission.events import EVENT_REASON, DrainPodEvents
from agent.executors.k8s_eviction import K8sEvictor
from agent.sources.kubeapi import make_api_client
from agent.sources.kubelet import parse_pod_list
from agent.state import Ledger, LedgerConfig
from cgroups.layout import Layout
from qos.model import NodeSnapshot, Resources, Workload

FIX = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def pods() -> list[Workload]:
    parsed, _ = parse_pod_list(json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text()),
                               Layout("cgroupfs"))
    return [p.workload for p in parsed]


@pytest.fixture
def api(pods: list[Workload], tls_files: TlsFiles) -> Iterator[FakeApiServer]:
    known = {(w.namespace, w.name): w.key.removeprefix("k8s/") for w in pods}
    with FakeApiServer(FIX / "apiserver" / "node.json", known, tls=(tls_files.cert, tls_files.key)) as s:
        yield s


def _snap(ws: list[Workload]) -> NodeSnapshot:
    return node_snapshot(ws, capacity=Resources(8000, 16 << 30), cpus=tuple(range(8)))


async def _settle(hook: DrainPodEvents) -> None:
    for _ in range(200):
        if not hook._tasks:
            return
        await asyncio.sleep(0.01)


async def test_drain_posts_one_event_per_be_pod_and_deadline(
        api: FakeApiServer, tls_files: TlsFiles, pods: list[Workload]) -> None:
    conf = client.Configuration()
    conf.host = api.url
    conf.ssl_ca_cert = tls_files.ca
    cfg = KubeApiConfig(timeout_s=2.0)
    evictor = K8sEvictor(cfg, make_api_client(cfg, conf), "node-a")
    ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None))
    hook = DrainPodEvents(ledger, evictor)
    snap = _snap(pods)
    be = [w for w in pods if w.be and not w.terminating]  # a pod already going needs no notice
    assert be and len(be) < len(pods), "the fixture should hold BE and HP pods"
    assert any(w.be and w.terminating for w in pods)

    hook.on_tick(snap, None, [])  # not draining: nothing
    await _settle(hook)
    assert api.events == []

    request_drain(ledger, 1, graceful=True, timeout_s=600)
    deadline = ledger.node.drain.deadline
    assert deadline is not None
    hook.on_tick(snap, None, [])
    await _settle(hook)
    hook.on_tick(snap, None, [])  # the same deadline again: no second Event
    await _settle(hook)
    events = [e for e in api.events if e["reason"] == EVENT_REASON]
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(w.name for w in be)
    assert all(e["type"] == "Warning" for e in events)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
    assert all(when in e["message"] for e in events)

    request_drain(ledger, 1, graceful=True, timeout_s=60)  # re-issued: a new deadline, told again
    hook.on_tick(snap, None, [])
    await _settle(hook)
    assert len([e for e in api.events if e["reason"] == EVENT_REASON]) == 2 * len(be)
