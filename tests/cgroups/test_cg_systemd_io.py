"""A disk's caps as systemd's IO*Max properties, and which writes go through systemd: on this host.

The properties are checked as they go on the wire (jeepney serialises the `SetUnitProperties` call the agent
makes and parses it back), against systemd's own names and types (src/core/dbus-cgroup.c: `IOReadBandwidthMax`
… `IOWriteIOPSMax`, `a(st)`; infinity is `CGROUP_LIMIT_MAX`, 2^64-1). The writer's choice is checked on cgroup
trees laid out in a temp dir, with a `SystemdUnits` that records the properties instead of calling systemd
(systemd itself: tests/systemd/test_systemd_io.py, in the guest).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from jeepney import DBusAddress, new_method_call
from jeepney.low_level import Parser

from cgroups.discovery import Hierarchy
from cgroups.errors import InvalidValue
from cgroups.holdings import Holder, Journal
from cgroups.io import NO_LIMIT, V1_FILES, IoLimit
from cgroups.systemd import IO_PROPERTIES, SystemdUnits, block_device, io_properties
from cgroups.writer import CgroupWriter

MB = 1 << 20
INFINITY = 2**64 - 1
IO = Holder("test_io")
ROOT = "kp.slice"
TIER = "kp-besteffort.slice"


class Recorded(SystemdUnits):
    """systemd as the writer sees it, with every `.slice` below the root a unit; `on_set` plays systemd's
    side (it makes the io controller's files appear, as systemd does when a unit first asks for them)."""

    def __init__(self, on_set: Any = None) -> None:
        super().__init__("/" + ROOT)
        self.sets: list[tuple[str, list[tuple[str, tuple[str, Any]]]]] = []
        self.on_set = on_set

    def owns(self, rel: str) -> bool:
        return rel.endswith(".slice")

    def knows(self, rel: str) -> bool:
        return True

    def set_properties(self, rel: str, properties: Sequence[tuple[str, tuple[str, Any]]]) -> None:
        self.sets.append((rel, list(properties)))
        if self.on_set is not None:
            self.on_set(rel)


def _v2(tmp_path: Path, *rels: str, io_max: bool = True) -> Path:
    for rel in rels:
        d = tmp_path / ROOT / rel
        d.mkdir(parents=True)
        if io_max:
            (d / "io.max").write_text("")
    return tmp_path


def test_a_cap_is_four_a_st_properties_naming_the_disk_by_its_numbers_and_infinity_lifts() -> None:
    props = io_properties("254:16", IoLimit(wbps=4 * MB, riops=300))
    assert props == [
        ("IOReadBandwidthMax", ("a(st)", [("/dev/block/254:16", INFINITY)])),
        ("IOWriteBandwidthMax", ("a(st)", [("/dev/block/254:16", 4 * MB)])),
        ("IOReadIOPSMax", ("a(st)", [("/dev/block/254:16", 300)])),
        ("IOWriteIOPSMax", ("a(st)", [("/dev/block/254:16", INFINITY)])),
    ]
    assert [name for name, _ in io_properties("8:0", NO_LIMIT)] == list(IO_PROPERTIES)
    assert all(v == ("a(st)", [("/dev/block/8:0", INFINITY)]) for _, v in io_properties("8:0", NO_LIMIT))
    assert block_device("259:0") == "/dev/block/259:0"
    for bad in ("sda", "/dev/sda", "8:0 ", "8:0/../1:3"):
        with pytest.raises(InvalidValue):
            block_device(bad)


def test_the_properties_go_on_the_wire_as_systemd_reads_them() -> None:
    """`SetUnitProperties(s unit, b runtime, a(sv) properties)`: each value a variant of `a(st)`, 64 bits."""
    manager = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                          interface="org.freedesktop.systemd1.Manager")
    props = io_properties("8:16", IoLimit(rbps=20_000_000))
    msg = new_method_call(manager, "SetUnitProperties", "sba(sv)", ("kp-besteffort.slice", True, props))
    (back,) = Parser().feed(msg.serialise(serial=7))
    assert back.header.fields[8] == "sba(sv)"  # the SIGNATURE header field
    unit, runtime, sent = back.body
    assert (unit, runtime) == ("kp-besteffort.slice", True)
    assert sent == [(name, (sig, [tuple(e) for e in entries])) for name, (sig, entries) in props]
    assert sent[0][1] == ("a(st)", [("/dev/block/8:16", 20_000_000)])
    assert sent[1][1] == ("a(st)", [("/dev/block/8:16", INFINITY)])


def test_on_v2_a_units_cap_goes_through_systemd_and_the_file_a_plain_cgroups_to_the_file_alone(
        tmp_path: Path) -> None:
    mount = _v2(tmp_path, TIER, f"{TIER}/hadoop-yarn")
    units = Recorded()
    w = CgroupWriter(Hierarchy.v2(mount), ROOT, units=units)
    assert w.set_io_limit(TIER, "8:16", IoLimit(wbps=4 * MB))
    assert units.sets == [(TIER, io_properties("8:16", IoLimit(wbps=4 * MB)))]
    assert (mount / ROOT / TIER / "io.max").read_text() == f"8:16 rbps=max wbps={4 * MB} riops=max wiops=max"
    assert w.stats.systemd_sets == 1
    assert not w.set_io_limit(TIER, "8:16", IoLimit(wbps=4 * MB)), "read-compare-write"
    assert w.stats.systemd_sets == 1
    assert w.set_io_limit(f"{TIER}/hadoop-yarn", "8:16", IoLimit(riops=100))  # not a unit
    assert (mount / ROOT / TIER / "hadoop-yarn" / "io.max").read_text() == \
        "8:16 rbps=max wbps=max riops=100 wiops=max"
    assert w.stats.systemd_sets == 1 and len(units.sets) == 1
    (mount / ROOT / TIER / "io.max").write_text(f"8:16 rbps=max wbps={4 * MB} riops=max wiops=max")
    assert w.set_io_limit(TIER, "8:16", NO_LIMIT)  # lifted: infinity to systemd, max to the file
    assert units.sets[-1] == (TIER, [(n, ("a(st)", [("/dev/block/8:16", INFINITY)])) for n in IO_PROPERTIES])


def test_on_v2_a_unit_without_the_io_controller_gets_it_from_systemd_and_no_cap_is_journaled_to_give_back(
        tmp_path: Path) -> None:
    mount = _v2(tmp_path, TIER, io_max=False)
    line = f"8:16 rbps=max wbps={4 * MB} riops=max wiops=max"
    units = Recorded(on_set=lambda rel: (mount / ROOT / rel / "io.max").write_text(line))
    journal = Journal(tmp_path / "held", "boot-1")
    w = CgroupWriter(Hierarchy.v2(mount), ROOT, units=units, journal=journal)
    with w.held_by(IO):
        assert w.set_io_limit(TIER, "8:16", IoLimit(wbps=4 * MB))
    assert [rel for rel, _ in units.sets] == [TIER], "systemd's value read back: no second set"
    held = journal.held[("io_max@8:16", TIER)]
    assert held.give_back == [None, None, None, None] and held.holder == IO.name
    # the next run (this one killed) does not hold it: given back through systemd as well
    again = Journal(tmp_path / "held", "boot-1")
    again.load()
    units.on_set = None
    w2 = CgroupWriter(Hierarchy.v2(mount), ROOT, units=units, journal=again)
    assert w2.settle(IO) == 1 and again.held == {}
    assert units.sets[-1] == (TIER, io_properties("8:16", NO_LIMIT))
    assert (mount / ROOT / TIER / "io.max").read_text() == "8:16 rbps=max wbps=max riops=max wiops=max"


def test_on_v1_the_blkio_files_alone_hold_the_caps(tmp_path: Path) -> None:
    blkio = tmp_path / "blkio"
    d = blkio / ROOT / TIER
    d.mkdir(parents=True)
    for name in V1_FILES:
        (d / name).write_text("")
    units = Recorded()
    w = CgroupWriter(Hierarchy(mode="v1", v1={"blkio": blkio}), ROOT, controllers=("blkio",), units=units)
    assert w.set_io_limit(TIER, "8:16", IoLimit(rbps=2 * MB, wiops=50))
    assert units.sets == [] and w.stats.systemd_sets == 0
    assert (d / "blkio.throttle.read_bps_device").read_text() == f"8:16 {2 * MB}"
    assert (d / "blkio.throttle.write_iops_device").read_text() == "8:16 50"
