"""The BE tier as a systemd slice the agent did not make: its knobs are set through systemd, which enables a
controller on a unit's path only when a unit asks for it."""

from __future__ import annotations

import pytest
from kit.systemd import CGROUP2, KUBEPODS, SystemdPods

from cgroups.discovery import discover
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

TIER = "kubepods-besteffort.slice"


def test_the_be_cpuset_is_set_on_a_tier_with_no_container_below_it(systemd_pods: SystemdPods) -> None:
    """With no BE container yet (no runtime's Delegate=yes scope below), kubepods-besteffort.slice has no
    cpuset.cpus: the writer asks systemd (AllowedCPUs), which enables the controller, then the file holds the
    cut. (Found by this guest: the writer read the missing file first and could not confine BE.)"""
    systemd_pods.pod("besteffort", CPUWeight=1)  # a pod slice, no container yet
    assert not (CGROUP2 / KUBEPODS / TIER / "cpuset.cpus").exists(), "the tier already has a cpuset"
    writer = CgroupWriter(discover(), KUBEPODS, units=SystemdUnits("/" + KUBEPODS))
    assert writer.set_cpuset(TIER, [1])
    assert (CGROUP2 / KUBEPODS / TIER / "cpuset.cpus").read_text().strip() == "1"
    assert systemd_pods.property(TIER, "AllowedCPUs") == "1"
    systemd_pods.reload()
    assert (CGROUP2 / KUBEPODS / TIER / "cpuset.cpus").read_text().strip() == "1"
