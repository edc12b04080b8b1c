"""A NodeSLO in its real format (checked against the vendored CRD schema) → memory QoS and CPU burst settings;
the YAML where it gives none; a refused field named; the source marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agent.sources.nodeslo_map import NODESLO, YAML, NodeSloError, ResourceQos, apply_resource_qos
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings

CRD = Path(__file__).parents[1] / "vendor" / "koordinator" / "slo.koordinator.sh_nodeslos.yaml"
BASE = ResourceQos(MemoryQosSettings(be=MemoryQosClass(enable=True, low_limit_percent=10)),
                   CpuBurstSettings("none", 300))


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodeslo(spec: dict[str, Any]) -> dict[str, Any]:
    doc = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
           "metadata": {"name": "node-1"}, "spec": spec}
    jsonschema.validate(doc, _schema())
    return doc


def test_the_classes_memory_qos_and_cpu_burst_are_read_and_marked() -> None:
    doc = _nodeslo({
        "resourceQOSStrategy": {
            "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 20, "lowLimitPercent": 40,
                                      "throttlingPercent": 80, "wmarkRatio": 95}},
            "beClass": {"memoryQOS": {"enable": False, "minLimitPercent": 50}},
        },
        "cpuBurstStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": 50,
                             "sharePoolThresholdPercent": 50},
    })
    got = apply_resource_qos(BASE, doc)
    assert got.memory.ls == MemoryQosClass(True, 20, 40, 80)
    assert got.memory.of("BE") == MemoryQosClass()  # enable false: koordlet's NoneMemoryQOS
    assert got.memory.lsr == MemoryQosClass()  # not given: koordlet's default, off
    assert got.burst == CpuBurstSettings("cpuBurstOnly", 50)
    assert (got.memory_source, got.burst_source) == (NODESLO, NODESLO)


def test_the_yaml_stays_for_what_the_nodeslo_does_not_give() -> None:
    doc = _nodeslo({"cpuBurstStrategy": {"policy": "auto"}})
    got = apply_resource_qos(BASE, doc)
    assert got.memory == BASE.memory and got.memory_source == YAML
    assert got.burst == CpuBurstSettings("auto", 1000)  # koordlet's default percent, not the YAML's 300
    assert apply_resource_qos(BASE, None) == BASE


@pytest.mark.parametrize(("spec", "field"), [
    ({"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"minLimitPercent": 101}}}}, "min_limit_percent"),
    ({"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": "yes"}}}}, "lsClass.memoryQOS.enable"),
    ({"cpuBurstStrategy": {"policy": "always"}}, "cpuBurstStrategy.policy"),
    ({"cpuBurstStrategy": {"cpuBurstPercent": 0}}, "cpuBurstPercent"),
    ({"cpuBurstStrategy": {"cpuBurstPercent": 1.5}}, "cpuBurstPercent"),
])
def test_a_bad_field_is_refused_naming_it(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(NodeSloError, match=field.replace(".", r"\.")):
        apply_resource_qos(BASE, {"spec": spec})
