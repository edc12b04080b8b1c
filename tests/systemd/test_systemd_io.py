"""A BE disk cap on a systemd-driver node: held through systemd, it survives what systemd re-applies.

Runs on a real systemd (PID 1) with pure cgroup v2: the test guest (docs/testing.md). The pod slices are made
over D-Bus as the kubelet's systemd driver makes them; the cap is on the guest's root disk. systemd writes a
unit's `io.max` from its own IO*Max properties on `daemon-reload` and on a `set-property` of any other
property, so a cap on a unit must be one of those properties; a cgroup that is no unit gets the file alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kit.poll import wait
from kit.systemd import CGROUP2, SystemdPods, read, systemctl, systemd_v2_host

from agent.config.io import IoConfig
from agent.executors.io_guard import BE_IO, IoGuard
from cgroups.discovery import Hierarchy
from cgroups.holdings import Journal
from cgroups.io import NO_LIMIT, IoLimit, disk_of
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter
from qos.actions import SetBeIoLimit
from qos.model import IoCap

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)

MB = 1 << 20
IO_MAX_PROPERTIES = ("IOReadBandwidthMax", "IOWriteBandwidthMax", "IOReadIOPSMax", "IOWriteIOPSMax")
NONE = dict.fromkeys(IO_MAX_PROPERTIES, "")


def _disk() -> str:
    dev = disk_of(os.stat("/").st_dev)
    assert dev is not None, "the guest's root filesystem is on no disk"
    return dev


def _cap(rel: str, dev: str) -> str | None:
    """`dev`'s line of `rel`'s io.max (None: no cap on it; no io.max either, the io controller off there)."""
    try:
        text = read(rel, "io.max")
    except FileNotFoundError:
        return None
    lines = [line for line in text.splitlines() if line.split()[:1] == [dev]]
    return lines[0] if lines else None


def _io_properties(unit: str) -> dict[str, str]:
    """The unit's IO*Max properties as `systemctl show` prints them ("" for none)."""
    out = systemctl("show", *(f"--property={n}" for n in IO_MAX_PROPERTIES), unit)
    got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {n: got.get(n, "") for n in IO_MAX_PROPERTIES}


def test_a_cap_on_a_unit_is_the_units_own_and_survives_reload_and_set_property_one_on_no_unit_is_a_file(
        own_pods: SystemdPods) -> None:
    dev = _disk()
    pod = own_pods.pod("besteffort")
    rel = own_pods.pod_rel("besteffort", pod.uid)
    w = CgroupWriter(Hierarchy.v2(CGROUP2), own_pods.root, units=SystemdUnits("/" + own_pods.root))
    assert w.units is not None and w.units.owns(pod.rel)
    assert w.set_io_limit(pod.rel, dev, IoLimit(wbps=4 * MB, riops=300))
    want = f"{dev} rbps=max wbps={4 * MB} riops=300 wiops=max"
    assert _cap(rel, dev) == want
    assert w.stats.systemd_sets == 1 and w.stats.systemd_errors == 0
    held = {**NONE, "IOWriteBandwidthMax": f"/dev/block/{dev} {4 * MB}",
            "IOReadIOPSMax": f"/dev/block/{dev} 300"}
    assert _io_properties(pod.slice) == held

    # A cgroup made by hand below the pod slice, named like a unit (systemd has no such unit): the file alone.
    hand = f"{pod.rel}/handmade.slice"
    w.mkdir(hand, controllers=("io",))
    try:
        assert not w.units.owns(hand)
        assert w.set_io_limit(hand, dev, IoLimit(rbps=8 * MB))
        assert _cap(f"{rel}/handmade.slice", dev) == f"{dev} rbps={8 * MB} wbps=max riops=max wiops=max"
        assert w.stats.systemd_sets == 1 and _io_properties(pod.slice) == held
    finally:
        w.rmdir(hand)

    own_pods.reload()
    assert _cap(rel, dev) == want, "daemon-reload undid a cap set through systemd"
    own_pods.set_property(pod.slice, CPUWeight=7)
    assert wait(lambda: read(rel, "cpu.weight") == "7", 10)
    assert _cap(rel, dev) == want, "a set-property of another property undid the cap"
    assert not w.set_io_limit(pod.rel, dev, IoLimit(wbps=4 * MB, riops=300)), "read-compare-write"

    # Lifted: no cap on the disk, in the file and in systemd, also after a reload.
    assert w.set_io_limit(pod.rel, dev, NO_LIMIT)
    assert _cap(rel, dev) is None
    assert _io_properties(pod.slice) == NONE
    own_pods.reload()
    assert _cap(rel, dev) is None, "daemon-reload put a lifted cap back"
    # A unit whose IO properties are all lifted has no IO config after the reload: systemd takes the io
    # controller off its cgroup, io.max with it. A cap set again brings both back through systemd.
    assert not (CGROUP2 / rel / "io.max").exists()
    assert w.set_io_limit(pod.rel, dev, IoLimit(rbps=16 * MB))
    assert _cap(rel, dev) == f"{dev} rbps={16 * MB} wbps=max riops=max wiops=max"
    assert w.stats.systemd_sets == 3 and w.stats.systemd_errors == 0


def test_the_disk_guard_caps_the_be_tier_slice_through_systemd_and_a_next_run_gives_it_back(
        own_pods: SystemdPods, tmp_path: Path) -> None:
    """The guard's cap on the BE tier (a slice systemd owns) is the unit's IO*Max property: a daemon-reload
    keeps it; a run killed while holding it leaves it (the journal names it); the next run with the guard off
    gives it back through systemd, so no reload brings it back."""
    dev = _disk()
    own_pods.pod("besteffort")
    tier = own_pods.tier_slice("besteffort")  # below the writer's root, the kubepods slice
    units = SystemdUnits("/" + own_pods.root)

    def writer() -> CgroupWriter:
        journal = Journal(tmp_path / "held", "boot-1")
        journal.load()
        return CgroupWriter(Hierarchy.v2(CGROUP2), own_pods.root, units=units, journal=journal)

    w = writer()
    guard, why = IoGuard.build(IoConfig(devices=(dev,)), w, tier)
    assert guard is not None, why
    floor = IoCap(20_000_000, 20_000_000, 400, 400)
    assert guard.submit(SetBeIoLimit(dev, floor, "HP waits"), False, _record) is not None
    assert _io_properties(tier)["IOWriteBandwidthMax"] == f"/dev/block/{dev} 20000000"
    own_pods.reload()
    on_tier = own_pods.tier_rel("besteffort")
    assert _cap(on_tier, dev) == f"{dev} rbps=20000000 wbps=20000000 riops=400 wiops=400"
    # killed here (nothing given back); the next run, guard off, settles what the journal names
    again = writer()
    assert again.settle(BE_IO) == 1
    assert _io_properties(tier) == NONE
    own_pods.reload()
    assert _cap(on_tier, dev) is None, "a reload put the crashed run's cap back"


def _record(*args: object) -> Any:
    return args
