"""Reporting YARN's allocations in the Node annotation `node.koordinator.sh/thirdPartyAllocations` and
reading `originExtendedAllocatable`, with the official client against a local fake API server (a real
one cannot run here) that applies the merge patch and refuses unknown patch content types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.apiserver import FakeApiServer
from kubernetes import client

from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.reporting.node_annotations import NodeReporter, ReportOutcome
from agent.sources.kubeapi import make_api_client
from qos.batch import (
    ORIGIN_ANNOTATION,
    THIRD_PARTY_ANNOTATION,
    BatchAnnotationError,
    parse_origin_annotation,
    parse_third_party_allocations,
)
from qos.model import Resources

FIX = Path(__file__).resolve().parent.parent / "fixtures"
GIB = 1 << 30


def _reporter(api: FakeApiServer, clock: FakeClock, **kw: object) -> NodeReporter:
    conf = client.Configuration()
    conf.host = api.url
    return NodeReporter(
        ReportingConfig(resync_s=300, **kw),
        make_api_client(KubeApiConfig(), conf),  # type: ignore[arg-type]
        "node-a",
        timeout_s=2.0,
        clock=clock,
    )


def test_patch_is_a_merge_patch_of_the_one_annotation(api: FakeApiServer, clock: FakeClock) -> None:
    rep = _reporter(api, clock)
    assert rep.report(Resources(5000, 5 * GIB)) is ReportOutcome.PATCHED
    ((ctype, body),) = api.patches
    assert ctype == "application/merge-patch+json"
    assert list(body) == ["metadata"] and list(body["metadata"]["annotations"]) == [THIRD_PARTY_ANNOTATION]
    value = api.annotations[THIRD_PARTY_ANNOTATION]
    assert json.loads(value) == {
        "allocations": [
            {
                "name": "coloc-agent-yarn",
                "priority": "koord-batch",
                "resources": {"kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": str(5 * GIB)},
            }
        ]
    }
    assert parse_third_party_allocations(value) == {"coloc-agent-yarn": Resources(5000, 5 * GIB)}
    assert ORIGIN_ANNOTATION in api.annotations  # the rest of the node is untouched


def test_only_when_changed_or_every_resync(api: FakeApiServer, clock: FakeClock) -> None:
    rep = _reporter(api, clock)
    assert rep.report(Resources(5000, GIB)) is ReportOutcome.PATCHED
    clock.advance(100)
    assert rep.report(Resources(5000, GIB)) is ReportOutcome.UNCHANGED
    assert len(api.patches) == 1
    assert rep.report(Resources(6000, GIB)) is ReportOutcome.PATCHED
    clock.advance(299)
    assert rep.report(Resources(6000, GIB)) is ReportOutcome.UNCHANGED
    clock.advance(1)
    assert rep.report(Resources(6000, GIB)) is ReportOutcome.PATCHED  # resync_s passed
    assert len(api.patches) == 3


def test_a_failed_patch_is_retried_next_time(api: FakeApiServer, clock: FakeClock) -> None:
    rep = _reporter(api, clock)
    api.node_script = [500]
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.FAILED
    assert THIRD_PARTY_ANNOTATION not in api.annotations
    assert rep.report(Resources(1000, GIB)) is ReportOutcome.PATCHED
    api.stop()
    assert rep.report(Resources(2000, GIB)) is ReportOutcome.FAILED
    assert rep.read() is None


def test_off_sends_nothing(api: FakeApiServer, clock: FakeClock) -> None:
    assert _reporter(api, clock, mode="off").report(Resources(1000, GIB)) is ReportOutcome.OFF
    assert api.requests == []


def test_origin_is_read_from_the_node(api: FakeApiServer, clock: FakeClock) -> None:
    ann = _reporter(api, clock).read()
    assert ann is not None and ann.third_party is None
    assert parse_origin_annotation(ann.origin) == Resources(8000, 32 * GIB)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not valid JSON"),
        ('{"resource": {}}', "expected an object with 'resources'"),
        ('{"resources": {"kubernetes.io/batch-cpu": "lots"}}', "batch-cpu: not a quantity"),
        ('{"resources": {"kubernetes.io/batch-cpu": "-5"}}', "out of range"),
        ('{"resources": {"kubernetes.io/batch-memory": "2Ei"}}', "out of range"),
        (None, "expected a JSON string"),
    ],
)
def test_bad_origin_annotation_names_the_problem(text: str | None, needle: str) -> None:
    with pytest.raises(BatchAnnotationError, match=ORIGIN_ANNOTATION) as err:
        parse_origin_annotation(text)
    assert needle in str(err.value)
