"""Defects the guest found in code another change owns (cgroups/writer.py with cgroups/systemd.py), kept out
of the guest selection until they are fixed:
`bash scripts/vm-test tests/vm/guest/test_pending_systemd_tier.py`."""

from __future__ import annotations

import pytest
from systemdkit import CGROUP2, KUBEPODS, SystemdPods

from cgroups.discovery import discover
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

TIER = "kubepods-besteffort.slice"


def test_the_be_cpuset_can_be_set_on_a_tier_with_no_container_below_it(systemd_pods: SystemdPods) -> None:
    """systemd enables cpuset in a slice only for a unit below that needs it (a runtime's Delegate=yes scope,
    or AllowedCPUs=): on a node with no BE container yet, kubepods-besteffort.slice has no cpuset.cpus. The
    writer reads the file before it asks systemd (AllowedCPUs, which would enable the controller), so the
    agent cannot confine BE there ("cpuset.cpus does not exist: this kernel or cgroup lacks the cpuset
    knob")."""
    systemd_pods.pod("besteffort", CPUWeight=1)  # a pod slice, no container yet
    assert not (CGROUP2 / KUBEPODS / TIER / "cpuset.cpus").exists(), "the tier already has a cpuset"
    writer = CgroupWriter(discover(), KUBEPODS, units=SystemdUnits("/" + KUBEPODS))
    assert writer.set_cpuset(TIER, [1])
    assert (CGROUP2 / KUBEPODS / TIER / "cpuset.cpus").read_text().strip() == "1"
