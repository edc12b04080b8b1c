"""`node.koordinator.sh/thirdPartyAllocations` read as koord-manager reads it: upstream's own Go type and code
(koordinator v1.8.0, vendored in tests/vendor/koordinator/, see its README) decide what the value may be.

`ThirdPartyAllocations.Allocations` is tagged `json:"allocations,omitempty"`: Go writes an empty list as `{}`
and reads `{}` and `{"allocations":null}` as no entries. `encoding/json` ignores unknown fields, matches field
names case-insensitively, reads `null` as the zero value, and fails the whole value on a wrong type or a bad
quantity; koord-manager then subtracts nothing. The writer test uses a local fake API server in place of a
real one (tests/kit/fakes/apiserver.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kit.fakes.apiserver import FakeApiServer
from kubernetes import client

from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.reporting.node_annotations import NodeReporter, ReportOutcome
from agent.sources.kubeapi import make_api_client
from qos.koord_annotations import THIRD_PARTY_ANNOTATION, BatchAnnotationError, parse_third_party_allocations
from qos.model import Resources

UPSTREAM = Path(__file__).resolve().parents[1] / "vendor" / "koordinator"
FIX = Path(__file__).resolve().parents[1] / "fixtures"
GIB = 1 << 30


def _go_fields(source: str, type_name: str) -> dict[str, tuple[str, str]]:
    """Field name -> (Go type, json tag) of `type <type_name> struct {...}` in a Go source file."""
    body = re.search(rf"type {type_name} struct \{{(.*?)\n\}}", source, re.S)
    assert body is not None, type_name
    fields = re.findall(r'^\s*(\w+)\s+(\S+)\s+`json:"([^"]*)"`', body.group(1), re.M)
    return {name: (go_type, tag) for name, go_type, tag in fields}


def test_the_vendored_upstream_type_and_subtraction_are_what_the_agent_follows() -> None:
    node_go = (UPSTREAM / "node.go").read_text()
    assert _go_fields(node_go, "ThirdPartyAllocations") == {
        "Allocations": ("[]ThirdPartyAllocation", "allocations,omitempty")}
    assert _go_fields(node_go, "ThirdPartyAllocation") == {
        "Name": ("string", "name"),
        "Priority": ("apiext.PriorityClass", "priority"),
        "Resources": ("corev1.ResourceList", "resources,omitempty"),
    }
    # Summed by priority class, whatever the name: every entry of the class counts.
    assert "if alloc.Priority == priority {" in node_go
    plugin = (UPSTREAM / "batchresource_plugin.go").read_text()
    assert "GetThirdPartyAllocatedResByPriority(node.Annotations, extension.PriorityBatch)" in plugin
    subtract = "quotav1.Max(quotav1.Subtract(originBatchAllocatable, thirdPartyBatchAllocated), batchZero)"
    assert subtract in plugin
    assert 'PriorityBatch PriorityClass = "koord-batch"' in (UPSTREAM / "priority.go").read_text()


@pytest.mark.parametrize("value", ["{}", '{"allocations":null}', '{"allocations":[]}', "null",
                                   ' { "allocations" : null } '])
def test_an_empty_value_as_upstream_writes_and_reads_it_has_no_entries(value: str) -> None:
    assert parse_third_party_allocations(value) == {}


def _upstream_examples() -> list[str]:
    """The annotation values in upstream's own tests of GetThirdPartyAllocations/SetThirdPartyAllocation."""
    src = (UPSTREAM / "node_test.go").read_text()
    return [json.loads(f'"{m}"') for m in re.findall(
        r'NodeThirdPartyAllocationsAnnotationKey:\s*"((?:[^"\\]|\\.)*)"', src)]


def test_upstreams_own_examples_read_as_upstream_reads_them() -> None:
    examples = _upstream_examples()
    assert examples[0] == "bad-format" and len(examples) == 5
    with pytest.raises(BatchAnnotationError, match="thirdPartyAllocations: not valid JSON"):
        parse_third_party_allocations(examples[0])
    # "get from annotation succ": hadoop-yarn, koord-batch, batch-cpu "1" (a milli-core count), 1Gi
    assert parse_third_party_allocations(examples[1]) == {"hadoop-yarn": Resources(1, GIB)}
    assert parse_third_party_allocations(examples[4]) == {"hadoop-yarn": Resources(2, 2 * GIB)}


@pytest.mark.parametrize(("value", "expected"), [
    # encoding/json: a null element is a zero-value entry (no name, no class, no resources)
    ('{"allocations":[null]}', {"": Resources()}),
    # a missing name or priority is "", missing or null resources are none
    ('{"allocations":[{"priority":"koord-batch","resources":{"kubernetes.io/batch-cpu":"500"}}]}',
     {"": Resources(500, 0)}),
    ('{"allocations":[{"name":"a","resources":null}]}', {"a": Resources()}),
    # unknown fields are ignored; field names match case-insensitively (the last match wins)
    ('{"version":2,"Allocations":[{"NAME":"a","Priority":"koord-batch","extra":1,'
     '"Resources":{"kubernetes.io/batch-cpu":"1k","cpu":"2"}}]}', {"a": Resources(1000, 0)}),
    # a quantity may be a JSON number; null is zero
    ('{"allocations":[{"name":"a","resources":{"kubernetes.io/batch-cpu":1500,'
     '"kubernetes.io/batch-memory":null}}]}', {"a": Resources(1500, 0)}),
])
def test_values_go_reads_are_read(value: str, expected: dict[str, Resources]) -> None:
    assert parse_third_party_allocations(value) == expected


@pytest.mark.parametrize(("value", "says"), [
    ("", "not valid JSON"),
    ('{"allocations":{}}', "'allocations' must be a list or null, got an object"),
    ('"x"', "must be an object or null, got a string"),
    ('{"allocations":[3]}', "allocations[0]: must be an object or null, got a number"),
    ('{"allocations":[{"name":7}]}', "allocations[0].name: must be a string or null, got a number"),
    ('{"allocations":[{"name":"a","priority":true}]}', "allocations[0].priority: must be a string"),
    ('{"allocations":[{"name":"a","resources":[]}]}', "allocations[0].resources: must be an object"),
    ('{"allocations":[{"name":"a","resources":{"cpu":"lots"}}]}',
     "allocations[0].resources: cpu: not a quantity"),
    ('{"allocations":[{"name":"a","resources":{"kubernetes.io/batch-cpu":NaN}}]}', "not valid JSON"),
])
def test_values_go_refuses_are_refused_naming_what_is_wrong(value: str, says: str) -> None:
    with pytest.raises(BatchAnnotationError) as err:
        parse_third_party_allocations(value)
    assert str(err.value).startswith(THIRD_PARTY_ANNOTATION) and says in str(err.value)


@pytest.mark.parametrize("value", ["{}", '{"allocations":null}'])
def test_our_entry_is_written_over_an_empty_value(api: FakeApiServer, value: str) -> None:
    """koord-manager's reading of `{}` is "no entries": the agent adds its own entry, as upstream's
    SetThirdPartyAllocation does, and does not refuse (and log every resync) as if it were garbage."""
    api.node["metadata"]["annotations"][THIRD_PARTY_ANNOTATION] = value
    conf = client.Configuration()
    conf.host = api.url
    reporter = NodeReporter(ReportingConfig(resync_s=300), make_api_client(KubeApiConfig(), conf), "node-a",
                            timeout_s=2.0)
    assert reporter.report(Resources(5000, 5 * GIB)) is ReportOutcome.PATCHED
    assert json.loads(api.annotations[THIRD_PARTY_ANNOTATION]) == {"allocations": [{
        "name": "coloc-agent-yarn", "priority": "koord-batch",
        "resources": {"kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": str(5 * GIB)}}]}
