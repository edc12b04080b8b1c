"""A NodeSLO's `resourceQOSStrategy.<class>.blkioQOS` (koordlet's `BlkIOQOSCfg`) → disk QoS settings:
realistic documents (checked against the vendored CRD schema) mapped, the BE tier's device caps and what is
not acted on, every refusal naming its field, and our bounds held to the CRD's field by field."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agent.config.sources import NodeSloConfig
from agent.sources.nodeslo import NodeSloSource
from agent.sources.nodeslo_map import NODESLO, YAML, NodeSloError, ResourceQos, apply_resource_qos
from agent.sources.settings import SettingsInForce
from cgroups.io import IoLimit, format_io_max
from qos.blkio_qos import BlkioBlock, BlkioQosClass, BlkioQosSettings, be_device_caps, unsupported
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings
from qos.model import NO_CAP, IoCap, Resources
from qos.policies import PolicyConfig

CRD = Path(__file__).parents[1] / "vendor" / "koordinator" / "slo.koordinator.sh_nodeslos.yaml"
BASE = ResourceQos(MemoryQosSettings(be=MemoryQosClass(enable=True, low_limit_percent=10)),
                   CpuBurstSettings("none", 300))
MI = 1 << 20
CLASS_KEYS = ("lsrClass", "lsClass", "beClass", "systemClass", "cgroupRoot")
BE = "NodeSLO spec.resourceQOSStrategy.beClass.blkioQOS"


@functools.cache
def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _validator() -> Any:
    schema = _schema()
    return jsonschema.validators.validator_for(schema)(schema)


def _crd_accepts(doc: Mapping[str, Any]) -> bool:
    return bool(_validator().is_valid(doc))


def _doc(strategy: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
            "spec": {"resourceQOSStrategy": strategy}}


def _nodeslo(strategy: dict[str, Any]) -> dict[str, Any]:
    """A NodeSLO the vendored CRD accepts."""
    doc = _doc(strategy)
    _validator().validate(doc)
    return doc


def _be(*blocks: dict[str, Any], enable: bool = True) -> dict[str, Any]:
    return {"beClass": {"blkioQOS": {"enable": enable, "blocks": list(blocks)}}}


def _device(name: str, **io: Any) -> dict[str, Any]:
    return {"name": name, "type": "device", "ioCfg": io}


# ---- mapping -----------------------------------------------------------------------------------------------


def test_a_realistic_nodeslo_maps_every_class_and_marks_the_source() -> None:
    doc = _nodeslo({
        "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 20},
                    "blkioQOS": {"enable": True, "blocks": [_device("/dev/vdb", readBPS=400 * MI)]}},
        "beClass": {"blkioQOS": {"enable": True, "blocks": [
            _device("/dev/vdb", readBPS=100 * MI, writeBPS=50 * MI, readIOPS=0, writeIOPS=2000,
                    ioWeightPercent=60),
            {"name": "/dev/nvme0n1p2", "type": "device"},
            {"name": "yoda-pool0", "type": "volumegroup", "ioCfg": {"readBPS": 10 * MI}},
        ]}},
        "systemClass": {"blkioQOS": {"enable": False}},
        "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [_device(
            "/dev/vdb", readLatency=3000, writeLatency=4000, readLatencyPercent=95, writeLatencyPercent=90,
            enableUserModel=True, modelReadBPS=3324911720, modelWriteBPS=2765819289, modelReadSeqIOPS=168274,
            modelWriteSeqIOPS=367565, modelReadRandIOPS=352545, modelWriteRandIOPS=339390)]}},
    })
    got = apply_resource_qos(BASE, doc)
    assert got.blkio_source == NODESLO and got.memory_source == NODESLO
    assert got.memory.ls == MemoryQosClass(True, 20)  # the memory mapping is untouched beside it
    assert got.blkio.be == BlkioQosClass(True, (
        BlkioBlock("/dev/vdb", "device", IoCap(rbps=100 * MI, wbps=50 * MI, wiops=2000),
                   weight_percent=60),
        BlkioBlock("/dev/nvme0n1p2", "device"),
        BlkioBlock("yoda-pool0", "volumegroup", IoCap(rbps=10 * MI)),
    ))
    assert got.blkio.ls == BlkioQosClass(True, (BlkioBlock("/dev/vdb", "device", IoCap(rbps=400 * MI)),))
    assert got.blkio.system == BlkioQosClass() and got.blkio.lsr == BlkioQosClass()
    root = got.blkio.root.blocks[0]
    assert (root.read_latency_us, root.write_latency_us, root.read_latency_percent,
            root.write_latency_percent, root.user_model) == (3000, 4000, 95, 90, True)
    assert dict(root.model) == {"modelReadBPS": 3324911720, "modelWriteBPS": 2765819289,
                                "modelReadSeqIOPS": 168274, "modelWriteSeqIOPS": 367565,
                                "modelReadRandIOPS": 352545, "modelWriteRandIOPS": 339390}

    # readIOPS 0 and the absent caps are koordlet's "no cap"; a block without ioCfg caps nothing
    assert be_device_caps(got.blkio) == {"/dev/vdb": IoCap(100 * MI, 50 * MI, None, 2000),
                                         "/dev/nvme0n1p2": NO_CAP}
    notes = unsupported(got.blkio)
    assert len(notes) == 4, notes
    assert notes[0].startswith("lsClass.blkioQOS: 1 block(s) not acted on") and "BE class only" in notes[0]
    assert notes[1].startswith("cgroupRoot.blkioQOS.blocks[0] (device /dev/vdb): not acted on") and \
        "blk-iocost" in notes[1]
    assert notes[2].startswith("beClass.blkioQOS.blocks[0] (device /dev/vdb): ioWeightPercent 60 not "
                               "acted on")
    assert notes[3].startswith("beClass.blkioQOS.blocks[2] (volumegroup yoda-pool0): not acted on") and \
        "volume group" in notes[3]
    assert all("\n" not in n for n in notes)


def test_the_be_class_turned_off_caps_nothing_and_says_nothing() -> None:
    blocks = [_device("/dev/vdb", readBPS=MI), {"name": "data", "type": "podvolume"}]
    for strategy in (_be(*blocks, enable=False), {"beClass": {"blkioQOS": {"blocks": blocks}}}):
        got = apply_resource_qos(BASE, _nodeslo(strategy))
        # an absent enable is koord-manager's default: false
        assert not got.blkio.be.enable and len(got.blkio.be.blocks) == 2
        assert be_device_caps(got.blkio) == {} and unsupported(got.blkio) == []


def test_a_strategy_without_blkio_is_koord_managers_default_and_none_keeps_the_yaml() -> None:
    assert BASE.blkio == BlkioQosSettings() and BASE.blkio_source == YAML  # the YAML gives no disk QoS
    got = apply_resource_qos(BASE, _nodeslo({"beClass": {"memoryQOS": {"enable": False}}}))
    assert got.blkio == BlkioQosSettings() and got.blkio_source == NODESLO
    # null is not in the CRD (an API server drops it): read as absent, Go's nil slice
    got = apply_resource_qos(BASE, _doc({"beClass": {"blkioQOS": {"enable": True, "blocks": None}}}))
    assert got.blkio.be == BlkioQosClass(True) and be_device_caps(got.blkio) == {}
    no_strategy = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                   "metadata": {"name": "node-1"}, "spec": {"cpuBurstStrategy": {"policy": "auto"}}}
    _validator().validate(no_strategy)
    got = apply_resource_qos(BASE, no_strategy)
    assert got.blkio is BASE.blkio and got.blkio_source == YAML
    assert apply_resource_qos(BASE, None) == BASE


def test_a_device_named_twice_takes_the_later_block_as_koordlets_writes_do() -> None:
    got = apply_resource_qos(BASE, _nodeslo(_be(_device("/dev/vdb", readBPS=MI, writeIOPS=10),
                                                _device("/dev/vdb", writeBPS=2 * MI))))
    assert be_device_caps(got.blkio) == {"/dev/vdb": IoCap(wbps=2 * MI)}


def test_a_podvolume_block_is_named_and_the_device_blocks_still_cap() -> None:
    got = apply_resource_qos(BASE, _nodeslo(_be({"name": "html", "type": "podvolume",
                                                 "ioCfg": {"readBPS": MI}},
                                                _device("/dev/vdc", writeBPS=MI))))
    assert be_device_caps(got.blkio) == {"/dev/vdc": IoCap(wbps=MI)}
    [note] = unsupported(got.blkio)
    assert note.startswith("beClass.blkioQOS.blocks[0] (podvolume html): not acted on")
    assert "koordlet applies none of the BE class's blocks" in note


def test_latencies_and_the_model_in_the_be_class_are_named_as_ignored_like_koordlet() -> None:
    got = apply_resource_qos(BASE, _nodeslo(_be(_device("/dev/vdb", readBPS=MI, ioWeightPercent=100,
                                                        readLatency=2000, writeLatencyPercent=90,
                                                        enableUserModel=False, modelWriteBPS=5))))
    assert be_device_caps(got.blkio) == {"/dev/vdb": IoCap(rbps=MI)}
    [note] = unsupported(got.blkio)  # weight 100 is koordlet's default: nothing to say
    assert note == ("beClass.blkioQOS.blocks[0] (device /dev/vdb): readLatency, writeLatencyPercent, "
                    "enableUserModel, modelWriteBPS ignored: koordlet reads them only under cgroupRoot")


@pytest.mark.parametrize("cls", ["lsrClass", "lsClass", "systemClass"])
def test_blocks_of_another_class_cap_nothing_for_be(cls: str) -> None:
    got = apply_resource_qos(BASE, _nodeslo({cls: {"blkioQOS": {"enable": True, "blocks": [
        _device("/dev/vdb", readBPS=MI)]}}}))
    assert be_device_caps(got.blkio) == {}
    [note] = unsupported(got.blkio)
    assert note.startswith(f"{cls}.blkioQOS: 1 block(s) not acted on")


def test_the_caps_are_cgroups_io_limits_field_for_field() -> None:
    assert [f.name for f in dataclasses.fields(IoCap)] == [f.name for f in dataclasses.fields(IoLimit)]
    caps = be_device_caps(apply_resource_qos(BASE, _nodeslo(_be(_device(
        "/dev/vdb", readBPS=100 * MI, writeBPS=0, readIOPS=300, writeIOPS=200)))).blkio)["/dev/vdb"]
    limit = IoLimit(*caps.values())
    assert limit == IoLimit(rbps=100 * MI, riops=300, wiops=200)
    assert format_io_max("253:16", limit) == f"253:16 rbps={100 * MI} wbps=max riops=300 wiops=200"
    with pytest.raises(ValueError, match="rbps"):
        IoCap(rbps=0)


def test_a_refused_blkio_keeps_what_is_in_force(caplog: pytest.LogCaptureFixture) -> None:
    """Through the NodeSLO source: the error logged in one line naming the field, nothing changed."""
    from kubernetes import client
    settings = SettingsInForce(PolicyConfig(), BASE, nodeslo=True)
    src = NodeSloSource(NodeSloConfig(), client.ApiClient(), "node-1", Resources(4000, 8 << 30), settings)
    assert src.update(_nodeslo(_be(_device("/dev/vdb", readBPS=MI))))
    good = settings.resource_qos
    assert be_device_caps(good.blkio) == {"/dev/vdb": IoCap(rbps=MI)}
    with caplog.at_level(logging.ERROR, logger="coloc.sources.nodeslo"):
        assert not src.update(_doc(_be(_device("/dev/vdb", readBPS=-1))))
    assert settings.resource_qos is good
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith(f"{BE}.blocks[0].ioCfg.readBPS: expected an integer ≥ 0, got -1")
    assert "\n" not in record.getMessage()


# ---- refusals ----------------------------------------------------------------------------------------------


def test_the_message_names_the_field_in_full() -> None:
    with pytest.raises(NodeSloError) as err:
        apply_resource_qos(BASE, _doc(_be(_device("/dev/vdb", readBPS="100M"))))
    assert str(err.value) == f"{BE}.blocks[0].ioCfg.readBPS: expected an integer ≥ 0, got '100M'"


@pytest.mark.parametrize(("blkio", "where", "words"), [
    (["on"], "", "expected an object, got list"),
    ({"enable": "true"}, ".enable", "expected true or false, got 'true'"),
    ({"enable": True, "blocks": {"name": "/dev/vdb"}}, ".blocks", "expected a list, got dict"),
    ({"blocks": [None]}, ".blocks[0]", "expected an object, got null"),
    ({"blocks": ["/dev/vdb"]}, ".blocks[0]", "expected an object, got str"),
    ({"blocks": [{"name": "/dev/vdb"}]}, ".blocks[0].type",
     "must be one of device, podvolume, volumegroup, got None"),
    ({"blocks": [{"name": "/dev/vdb", "type": "disk"}]}, ".blocks[0].type", "got 'disk'"),
    ({"blocks": [{"name": "/dev/vdb", "type": "Device"}]}, ".blocks[0].type", "got 'Device'"),
    ({"blocks": [{"type": "device"}]}, ".blocks[0].name", "expected a non-empty string, got None"),
    ({"blocks": [{"name": "", "type": "volumegroup"}]}, ".blocks[0].name", "expected a non-empty string"),
    ({"blocks": [{"name": 7, "type": "podvolume"}]}, ".blocks[0].name", "got 7"),
    ({"blocks": [{"name": "vdb", "type": "device"}]}, ".blocks[0].name", "under /dev/"),
    ({"blocks": [{"name": "/dev/", "type": "device"}]}, ".blocks[0].name", "under /dev/"),
    ({"blocks": [{"name": "/dev/../etc/passwd", "type": "device"}]}, ".blocks[0].name", "under /dev/"),
    ({"blocks": [{"name": "/dev/vdb/", "type": "device"}]}, ".blocks[0].name", "under /dev/"),
    ({"blocks": [{"name": "/dev/vd b", "type": "device"}]}, ".blocks[0].name", "under /dev/"),
    ({"blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": [1]}]}, ".blocks[0].ioCfg",
     "expected an object, got list"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_structure_is_refused_naming_it(blkio: object, where: str, words: str) -> None:
    with pytest.raises(NodeSloError) as err:
        apply_resource_qos(BASE, _doc({"beClass": {"blkioQOS": blkio}}))
    assert str(err.value).startswith(f"{BE}{where}: "), str(err.value)
    assert words in str(err.value)


@pytest.mark.parametrize(("field", "value", "words"), [
    *((f, v, "expected an integer ≥ 0") for f in ("readBPS", "writeBPS", "readIOPS", "writeIOPS")
      for v in (-1, 1.5, True, "1Mi")),
    ("readBPS", 1 << 63, "expected an integer ≥ 0 that fits in int64"),
    ("writeIOPS", 10**3000, "expected an integer ≥ 0 that fits in int64"),
    ("ioWeightPercent", 0, "expected an integer from 1 to 100, got 0"),
    ("ioWeightPercent", 101, "expected an integer from 1 to 100, got 101"),
    ("readLatency", -1, "expected an integer ≥ 0, got -1"),
    ("writeLatency", 0.5, "expected an integer ≥ 0, got 0.5"),
    ("readLatencyPercent", 101, "expected an integer from 0 to 100"),
    ("writeLatencyPercent", -1, "expected an integer from 0 to 100"),
    ("enableUserModel", "yes", "expected true or false, got 'yes'"),
    ("enableUserModel", 1, "expected true or false, got 1"),
    *((f, 0, "expected an integer ≥ 1, got 0") for f in (
        "modelReadBPS", "modelWriteBPS", "modelReadSeqIOPS", "modelWriteSeqIOPS", "modelReadRandIOPS",
        "modelWriteRandIOPS")),
], ids=lambda v: v if isinstance(v, str) else repr(v)[:20])
def test_a_bad_io_field_is_refused_naming_it(field: str, value: object, words: str) -> None:
    with pytest.raises(NodeSloError) as err:
        apply_resource_qos(BASE, _doc(_be(_device("/dev/vdb"), _device("/dev/vdc", **{field: value}))))
    message = str(err.value)
    assert message.startswith(f"{BE}.blocks[1].ioCfg.{field}: {words}"), message
    assert len(message) < 250  # a huge value is shown cut


@pytest.mark.parametrize("cls", CLASS_KEYS)
def test_every_class_is_checked(cls: str) -> None:
    where = rf"^NodeSLO spec\.resourceQOSStrategy\.{cls}\.blkioQOS\.blocks\[0\]\.ioCfg\.writeBPS: "
    with pytest.raises(NodeSloError, match=where):
        apply_resource_qos(BASE, _doc({cls: {"blkioQOS": {"blocks": [_device("/dev/vdb", writeBPS=-5)]}}}))
    with pytest.raises(NodeSloError, match=rf"resourceQOSStrategy\.{cls}: expected an object"):
        apply_resource_qos(BASE, _doc({cls: "on"}))


# ---- against the vendored CRD ------------------------------------------------------------------------------


def _io_schema() -> dict[str, Any]:
    be = _schema()["properties"]["spec"]["properties"]["resourceQOSStrategy"]["properties"]["beClass"]
    io: dict[str, Any] = be["properties"]["blkioQOS"]["properties"]["blocks"]["items"]["properties"]["ioCfg"]
    return io


def _cases() -> list[tuple[str, object]]:
    """For every ioCfg field the CRD has: values at and just past each of its bounds, and of a wrong type."""
    out: list[tuple[str, object]] = []
    for field, prop in sorted(_io_schema()["properties"].items()):
        if prop["type"] == "boolean":
            out += [(field, True), (field, False), (field, "true"), (field, 1)]
            continue
        assert prop["type"] == "integer", field
        low = prop.get("minimum", 0)  # no minimum: 0 and -1, where we are stricter (STRICTER)
        out += [(field, low), (field, low - 1), (field, 1.5), (field, "1")]
        if "maximum" in prop:
            out += [(field, prop["maximum"]), (field, prop["maximum"] + 1)]
    return out


# Stricter than the CRD, each where koordlet refuses the value at run time: a latency below 0 (its
# blkio.cost.qos validator), a block type other than its three, an empty or non-/dev/ device name (not found:
# the class's whole update fails).
STRICTER = {("readLatency", -1), ("writeLatency", -1)}


@pytest.mark.parametrize(("cls", "field", "value"), [(c, f, v) for c in CLASS_KEYS for f, v in _cases()],
                         ids=repr)
def test_each_io_field_is_bounded_as_the_crd_bounds_it(cls: str, field: str, value: object) -> None:
    doc = _doc({cls: {"blkioQOS": {"enable": True, "blocks": [_device("/dev/vdb", **{field: value})]}}})
    crd = _crd_accepts(doc)
    try:
        apply_resource_qos(BASE, doc)
        ours = True
    except NodeSloError as err:
        assert f"{cls}.blkioQOS.blocks[0].ioCfg.{field}: " in str(err)
        ours = False
    if (field, value) in STRICTER:
        assert crd and not ours
    else:
        assert ours == crd, (field, value, crd)


def test_every_io_field_of_the_crd_is_one_we_read() -> None:
    """The CRD's ioCfg fields are exactly those `_cases` reaches: a field added upstream shows up here."""
    assert set(_io_schema()["properties"]) == {
        "readIOPS", "writeIOPS", "readBPS", "writeBPS", "ioWeightPercent", "readLatency", "writeLatency",
        "readLatencyPercent", "writeLatencyPercent", "enableUserModel", "modelReadBPS", "modelWriteBPS",
        "modelReadSeqIOPS", "modelWriteSeqIOPS", "modelReadRandIOPS", "modelWriteRandIOPS"}
    for cls in CLASS_KEYS:
        props = _schema()["properties"]["spec"]["properties"]["resourceQOSStrategy"]["properties"][cls]
        assert props["properties"]["blkioQOS"]["properties"]["blocks"]["items"]["properties"]["ioCfg"] == \
            _io_schema()


@pytest.mark.parametrize("block", [
    {"name": "/dev/vdb", "type": "disk"}, {"name": "", "type": "device"}, {"name": "vdb", "type": "device"},
    {"type": "device"}, {"name": "/dev/vdb"},
])
def test_a_block_the_crd_lets_through_but_koordlet_fails_on_is_refused(block: dict[str, Any]) -> None:
    doc = _doc(_be(block))
    assert _crd_accepts(doc)  # `type` is a free string in the CRD, `name` too
    with pytest.raises(NodeSloError):
        apply_resource_qos(BASE, doc)


@pytest.mark.parametrize("blkio", [{"enable": "yes"}, {"blocks": {}}, {"blocks": ["/dev/vdb"]},
                                   {"blocks": [{"name": 1, "type": "device"}]},
                                   {"blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": []}]}])
def test_what_the_crd_refuses_by_type_we_refuse(blkio: dict[str, Any]) -> None:
    doc = _doc({"beClass": {"blkioQOS": blkio}})
    assert not _crd_accepts(doc)
    with pytest.raises(NodeSloError):
        apply_resource_qos(BASE, doc)


def _prune(schema: Mapping[str, Any], value: Any) -> Any:
    """What an API server serving this structural schema stores: every field the schema lacks dropped."""
    if isinstance(value, dict) and "properties" in schema and \
            not schema.get("x-kubernetes-preserve-unknown-fields"):
        return {k: _prune(schema["properties"][k], v) for k, v in value.items() if k in schema["properties"]}
    if isinstance(value, list) and "items" in schema:
        return [_prune(schema["items"], v) for v in value]
    return value


def test_a_field_the_crd_lacks_is_ignored_as_the_api_server_prunes_it() -> None:
    doc = _doc({
        "beClass": {"blkioQOS": {"enable": True, "mode": "strict", "blocks": [
            {"name": "/dev/vdb", "type": "device", "weight": 5,
             "ioCfg": {"readBPS": MI, "readBps": "typo", "discardBPS": -1}}]}},
        "cgroupRoot": {"blkioQOS": {"enable": False, "blocks": [], "extra": {"x": 1}}},
    })
    pruned = _prune(_schema(), copy.deepcopy(doc))
    assert pruned != doc and "readBps" not in str(pruned)
    _validator().validate(pruned)
    assert apply_resource_qos(BASE, doc) == apply_resource_qos(BASE, pruned)
    assert be_device_caps(apply_resource_qos(BASE, doc).blkio) == {"/dev/vdb": IoCap(rbps=MI)}
