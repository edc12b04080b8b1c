"""The memory QoS record beside the state file (agent/state/held_memory.py): what one run writes, the next
run of the same boot reads back; another boot's, a damaged or a hostile record gives nothing back, and says
why."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from agent.state.held_be import egress_record, suppression_record
from agent.state.held_memory import FORMAT, memory_record, tier_cap_record
from qos.memory_qos import MemoryValues
from qos.tier_memory import TierCap

CTR = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab.slice/cri-containerd-1.scope"
HELD = {
    "kubepods.slice": (MemoryValues("kubepods.slice", 96 << 20, 120 << 20),),
    # a container held at one value and recorded, before the write, with the next one too
    CTR: (MemoryValues(CTR, 32 << 20, 48 << 20, 400 << 20, sets_high=True),
          MemoryValues(CTR, 64 << 20, 96 << 20, 400 << 20, sets_high=True)),
    "kubepods.slice/kubepods-besteffort.slice/x.scope":
        (MemoryValues("kubepods.slice/kubepods-besteffort.slice/x.scope", 0, 0, None, sets_high=True),),
}


def test_what_one_run_records_the_next_run_of_the_same_boot_reads_back(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    memory_record(state, "boot-1").save(HELD)
    path = tmp_path / "state.json.memqos"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert not list(tmp_path.glob(".state.json.memqos.tmp-*")), "a temporary file was left"
    assert memory_record(state, "boot-1").load() == HELD
    assert json.loads(path.read_text())["format"] == FORMAT
    memory_record(state, "boot-1").save({})
    assert memory_record(state, "boot-1").load() == {}


def test_another_boots_record_gives_nothing_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    memory_record(tmp_path / "state.json", "boot-1").save(HELD)
    with caplog.at_level(logging.INFO, "coloc.state"):
        assert memory_record(tmp_path / "state.json", "boot-2").load() == {}
        assert memory_record(tmp_path / "state.json", "").load() == {}, "an unknown boot is not this one"
    assert caplog.records == []  # another boot's record is expected after a reboot, not a fault
    assert memory_record(tmp_path / "nothing.json", "boot-1").load() == {}


def _entry(**fields: object) -> dict[str, object]:
    return {"rel": "kubepods.slice", "min": 1, "low": 2, "high": None, "sets_high": False, **fields}


@pytest.mark.parametrize(("body", "named"), [
    (b"{not json", "memqos is unusable"),
    (json.dumps({"format": "other/v1", "boot_id": "boot-1", "cgroups": []}).encode(), "format"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": {}}).encode(), "cgroups: must be a list"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [_entry(rel="../../etc")]}).encode(),
     "cgroups[0].rel"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [_entry(rel="/sys/fs/cgroup")]}).encode(),
     "absolute"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [_entry(), _entry(min=-1)]}).encode(),
     "cgroups[1].min"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [_entry(high="max")]}).encode(),
     "cgroups[0].high"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [_entry(sets_high=1)]}).encode(),
     "cgroups[0].sets_high"),
    (json.dumps({"format": FORMAT, "boot_id": "boot-1", "cgroups": [{"rel": "a"}]}).encode(), "cgroups[0]"),
])
def test_a_damaged_or_hostile_record_gives_nothing_back_and_says_what_is_wrong(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, body: bytes, named: str) -> None:
    (tmp_path / "state.json.memqos").write_bytes(body)
    with caplog.at_level(logging.ERROR, "coloc.state"):
        assert memory_record(tmp_path / "state.json", "boot-1").load() == {}
    assert len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert "state.json.memqos" in line and named in line, line
    assert (tmp_path / "state.json.memqos").read_bytes() == body, "the record was changed"


def test_a_record_that_cannot_be_written_is_said_and_does_not_raise(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() == 0:
        blocked = tmp_path / "file"
        blocked.write_text("")
        state = blocked / "state.json"  # a directory that is a file: refused even to root
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        state = tmp_path / "ro" / "state.json"
    with caplog.at_level(logging.WARNING, "coloc.state"):
        memory_record(state, "boot-1").save(HELD)
    assert any("memory QoS record not written" in r.getMessage() for r in caplog.records)


def test_the_tier_cap_record_round_trips_and_refuses_what_is_not_a_cap(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    held = ("kubepods/besteffort", (TierCap(460 << 20, 512 << 20), TierCap(None, 768 << 20)))
    tier_cap_record(state, "boot-1").save(held)
    assert tier_cap_record(state, "boot-1").load() == held
    assert tier_cap_record(state, "boot-2").load() is None
    tier_cap_record(state, "boot-1").save(None)
    assert tier_cap_record(state, "boot-1").load() is None
    path = tmp_path / "state.json.tiercap"
    bad = (({"rel": "../../memory", "caps": []}, "tier_cap.rel"),
           ({"rel": "besteffort", "caps": [{"high": None, "max": -1}]}, "tier_cap.caps[0].max"),
           ({"rel": "besteffort", "caps": [{"max": 1}]}, "tier_cap.caps[0]"),
           ({"rel": "besteffort"}, "tier_cap: must be null or an object"))
    for payload, named in bad:
        body = {"format": "coloc-agent/tier-cap/v1", "boot_id": "boot-1", "tier_cap": payload}
        path.write_text(json.dumps(body))
        caplog.clear()
        with caplog.at_level(logging.ERROR, "coloc.state"):
            assert tier_cap_record(state, "boot-1").load() is None
        assert len(caplog.records) == 1 and named in caplog.records[0].getMessage(), caplog.records
        assert "BE tier memory cap record" in caplog.records[0].getMessage()


def test_the_suppression_mark_round_trips_and_a_hostile_tier_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    suppression_record(state, "boot-1").save("kubepods/besteffort")
    assert suppression_record(state, "boot-1").load() == "kubepods/besteffort"
    assert suppression_record(state, "boot-2").load() is None
    suppression_record(state, "boot-1").save(None)
    assert suppression_record(state, "boot-1").load() is None
    body = {"format": "coloc-agent/be-suppression/v1", "boot_id": "boot-1", "tier": "../../cpu"}
    (tmp_path / "state.json.besuppress").write_text(json.dumps(body))
    with caplog.at_level(logging.ERROR, "coloc.state"):
        assert suppression_record(state, "boot-1").load() is None
    assert len(caplog.records) == 1, caplog.records
    line = caplog.records[0].getMessage()
    assert "BE CPU suppression record" in line and "tier '../../cpu'" in line, line


def test_a_record_nested_too_deep_for_the_parser_gives_nothing_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "state.json.memqos").write_text("[" * 100_000)  # RecursionError in json.loads
    (tmp_path / "state.json.egress").write_text(json.dumps(
        {"format": "coloc-agent/egress/v1", "boot_id": "boot-1",
         "egress": {"device": "eth0", "netns": "", "yarn_cgroup2": 7}}))  # not a path: AttributeError inside
    with caplog.at_level(logging.ERROR, "coloc.state"):
        assert memory_record(tmp_path / "state.json", "boot-1").load() == {}
        assert egress_record(tmp_path / "state.json", "boot-1").load() is None
    assert len(caplog.records) == 2, caplog.records
