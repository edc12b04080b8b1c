"""The thirdPartyAllocations writer against a local fake API server (a real one cannot run here) that
applies merge patches, bumps `resourceVersion` on every write and answers 409 to a stale one, as the real
server does. Other allocators' entries survive; a conflict is retried; the yarn-operator mode defers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kit.fakes.apiserver import FakeApiServer
from kit.snapshot import node_snapshot
from kubernetes import client

from agent.config.agent import AgentConfig
from agent.config.load import ConfigError
from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.daemon.node_reports import NodeReports
from agent.daemon.runtime import yarn_entries
from agent.reporting.node_annotations import NodeReporter, ReportOutcome
from agent.sources.kubeapi import make_api_client
from qos.batch import THIRD_PARTY_ANNOTATION, other_allocations, parse_third_party_allocations
from qos.model import Resources

FIX = Path(__file__).resolve().parent.parent / "fixtures"
GIB = 1 << 30
OPERATOR = {
    "name": "hadoop-yarn",
    "priority": "koord-batch",
    "resources": {"kubernetes.io/batch-cpu": "3000", "kubernetes.io/batch-memory": "3221225472"},
}
OTHER = {"name": "flink-native", "priority": "koord-free", "resources": {"kubernetes.io/batch-cpu": "500"}}


def _reporter(api: FakeApiServer, **kw: object) -> NodeReporter:
    conf = client.Configuration()
    conf.host = api.url
    return NodeReporter(
        ReportingConfig(resync_s=300, **kw),  # type: ignore[arg-type]
        make_api_client(KubeApiConfig(), conf),
        "node-a",
        timeout_s=2.0,
    )


def _set(api: FakeApiServer, entries: list[dict[str, object]]) -> None:
    api.node["metadata"]["annotations"][THIRD_PARTY_ANNOTATION] = json.dumps({"allocations": entries})


def _entries(api: FakeApiServer) -> list[dict[str, object]]:
    return list(json.loads(api.annotations[THIRD_PARTY_ANNOTATION])["allocations"])


def test_foreign_entries_survive_and_ours_is_not_the_operators(api: FakeApiServer) -> None:
    _set(api, [OPERATOR, OTHER])
    assert _reporter(api).report(Resources(5000, 5 * GIB)) is ReportOutcome.PATCHED
    entries = _entries(api)
    assert entries[:2] == [OPERATOR, OTHER], "foreign entries untouched, in place"
    assert parse_third_party_allocations(api.annotations[THIRD_PARTY_ANNOTATION])[
        "coloc-agent-yarn"
    ] == Resources(5000, 5 * GIB)
    ((_, body),) = api.patches
    assert body["metadata"]["resourceVersion"], "the write is conditional on what was read"


def test_a_conflict_is_read_again_and_retried_keeping_the_concurrent_entry(api: FakeApiServer) -> None:
    rep = _reporter(api)
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.PATCHED
    # koord-yarn-operator rewrites the whole annotation from its cache between our read and our write
    api.interleave = [
        {"metadata": {"annotations": {THIRD_PARTY_ANNOTATION: json.dumps({"allocations": [OPERATOR]})}}}
    ]
    assert rep.report(Resources(2000, GIB)) is ReportOutcome.PATCHED
    assert api.conflicts == 1
    names = [e["name"] for e in _entries(api)]
    assert names == ["hadoop-yarn", "coloc-agent-yarn"], "ours re-asserted, the operator's kept"


def test_our_entry_is_reasserted_when_the_operator_dropped_it(api: FakeApiServer) -> None:
    rep = _reporter(api)
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.PATCHED
    _set(api, [OPERATOR])  # the operator's stale cache wrote over us
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.PATCHED
    assert [e["name"] for e in _entries(api)] == ["hadoop-yarn", "coloc-agent-yarn"]
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.UNCHANGED  # idempotent: no fight


def test_unless_operator_mode_defers_and_removes_ours(api: FakeApiServer) -> None:
    rep = _reporter(api, yarn="unless-operator")
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.PATCHED  # no operator: we report
    entries = _entries(api)
    _set(api, [*entries, OPERATOR])
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.DEFERRED
    assert [e["name"] for e in _entries(api)] == ["hadoop-yarn"]
    n = len(api.patches)
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.DEFERRED and len(api.patches) == n


def test_an_unreadable_value_is_not_overwritten(api: FakeApiServer) -> None:
    api.node["metadata"]["annotations"][THIRD_PARTY_ANNOTATION] = "{broken"
    assert _reporter(api).report(Resources(1000, GIB)) is ReportOutcome.FAILED
    assert api.patches == [] and api.annotations[THIRD_PARTY_ANNOTATION] == "{broken"


def test_persistent_conflicts_give_up(api: FakeApiServer) -> None:
    rep = _reporter(api, max_conflict_retries=2)
    api.interleave = [{"metadata": {"labels": {"x": "1"}}}]
    # every PATCH is preceded by another write: script two of them
    orig = api._patch

    def always_conflict(rec):  # type: ignore[no-untyped-def]
        api.interleave.append({"metadata": {"labels": {"x": str(api.conflicts)}}})
        return orig(rec)

    api._patch = always_conflict  # type: ignore[method-assign]
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.FAILED
    assert api.conflicts == 2 and THIRD_PARTY_ANNOTATION not in api.annotations


def test_our_name_may_not_be_the_operators() -> None:
    with pytest.raises(ConfigError, match="allocation_name"):
        ReportingConfig(allocation_name="hadoop-yarn")


OURS_STALE = {"name": "coloc-agent-yarn", "priority": "koord-batch",
              "resources": {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": "8589934592"}}


def test_our_entry_is_withdrawn_once_the_yarn_source_is_off(api: FakeApiServer) -> None:
    """An agent that reported YARN is started with its YARN source off: its entry is nobody's to keep up to
    date, and koord-manager would subtract it from the node's batch allocatable for good. The next run takes
    it out (the others' entries kept), and, until then, does not count it as another allocator's."""
    _set(api, [OPERATOR, OURS_STALE, OTHER])
    # the operator's entry only (OTHER is koord-free, which koord-manager does not subtract)
    assert other_allocations(
        node_snapshot(third_party_annotation=api.annotations[THIRD_PARTY_ANNOTATION]),
        yarn_entries(AgentConfig())) == Resources(3000, 3 * GIB), "our own stale entry counted as another's"
    reports = NodeReports(_reporter(api), 300.0, yarn=None)
    assert asyncio.run(reports._report())
    assert _entries(api) == [OPERATOR, OTHER]
    ((_, body),) = api.patches
    assert body["metadata"]["resourceVersion"], "the write is conditional on what was read"
    assert asyncio.run(reports._report())
    assert len(api.patches) == 1, "nothing of ours left: no second write"
    _set(api, [OURS_STALE])
    assert asyncio.run(NodeReports(_reporter(api), 300.0, yarn=None)._report())
    assert THIRD_PARTY_ANNOTATION not in api.annotations, "an annotation with no entry left is removed"
