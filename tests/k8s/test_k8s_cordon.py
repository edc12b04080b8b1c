"""Cordon while decommissioning, uncordon on recommission: merge patches of the Node, checked by the local
fake API server as the real one would (content type, body); a Node the agent did not cordon is left as is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kit.fakes.apiserver import FakeApiServer
from kit.snapshot import node_snapshot
from kubernetes import client

from agent.config.sources import KubeApiConfig
from agent.decommission.controller import request_drain, request_recommission
from agent.reporting.cordon import CORDON_ANNOTATION, DrainCordon
from agent.sources.kubeapi import make_api_client
from agent.state import Ledger, LedgerConfig
from qos.model import Resources

FIX = Path(__file__).resolve().parent.parent / "fixtures"
SNAP = node_snapshot(capacity=Resources(2000, 1 << 30), cpus=(0, 1))


async def _tick(hook: DrainCordon) -> None:
    hook.on_tick(SNAP, None, [])
    for _ in range(300):
        if not hook._busy:
            return
        await asyncio.sleep(0.01)


async def test_cordon_follows_the_drain() -> None:
    with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        conf = client.Configuration()
        conf.host = api.url
        ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None))
        hook = DrainCordon(ledger, make_api_client(KubeApiConfig(), conf), "node-a", 2.0)

        await _tick(hook)  # RECOVERING, never cordoned: nothing to do
        assert api.patches == []

        request_drain(ledger, 1, graceful=True, timeout_s=600)
        await _tick(hook)
        await _tick(hook)  # already cordoned: no second patch
        assert len(api.patches) == 1
        ctype, body = api.patches[0]
        assert ctype == "application/merge-patch+json"
        assert body["spec"] == {"unschedulable": True}
        assert api.node["spec"]["unschedulable"] is True
        assert api.annotations[CORDON_ANNOTATION] == "true"

        request_recommission(ledger, 1)
        await _tick(hook)
        assert api.node["spec"]["unschedulable"] is False
        assert CORDON_ANNOTATION not in api.annotations
        assert len(api.patches) == 2


def test_cordon_needs_the_kubernetes_api(tmp_path: Path) -> None:
    from agent.config.agent import ConfigError, load_config

    p = tmp_path / "c.yaml"
    p.write_text("drain: {cordon: true}")
    with pytest.raises(ConfigError, match=r"drain\.cordon"):
        load_config(p)


async def test_a_cordon_a_killed_run_left_is_lifted_by_the_next_run_and_an_operators_is_kept() -> None:
    """The recommission was saved, then the agent was killed before its uncordon patch went out: the next
    run (nothing of its own in memory) reads the Node once, finds the cordon carrying our annotation and
    lifts it; also with cordoning turned off in its config. A cordon without the annotation is left."""
    for cordon in (True, False):
        with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
            conf = client.Configuration()
            conf.host = api.url
            ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None))
            killed = DrainCordon(ledger, make_api_client(KubeApiConfig(), conf), "node-a", 2.0)
            request_drain(ledger, 1, graceful=True, timeout_s=600)
            await _tick(killed)
            assert api.node["spec"]["unschedulable"] is True
            request_recommission(ledger, 1)  # saved; the run is killed before its next tick
            again = DrainCordon(ledger, make_api_client(KubeApiConfig(), conf), "node-a", 2.0, cordon=cordon)
            for _ in range(3):
                await _tick(again)
            assert api.node["spec"]["unschedulable"] is False, cordon
            assert CORDON_ANNOTATION not in api.annotations

        with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
            conf = client.Configuration()
            conf.host = api.url
            api.node["spec"]["unschedulable"] = True  # an operator's `kubectl cordon`
            ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None))
            request_drain(ledger, 1, graceful=True, timeout_s=600)
            request_recommission(ledger, 1)
            again = DrainCordon(ledger, make_api_client(KubeApiConfig(), conf), "node-a", 2.0, cordon=cordon)
            for _ in range(3):
                await _tick(again)
            assert api.node["spec"]["unschedulable"] is True and api.patches == []
