"""Defects the guest found in code another change owns (cgroups/writer.py), kept out of the guest selection
until they are fixed: run them with `bash scripts/vm-test tests/vm/guest/test_pending_writer_v2.py`."""

from __future__ import annotations

import signal
import time

import pytest
from realcg import RealRoot

from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]


def test_kill_all_thaws_a_frozen_cgroup_on_v2_too(real_root: RealRoot) -> None:
    """kill_all promises a frozen cgroup is thawed afterwards; the v2 SIGKILL path (cgroup.kill) returns
    before the thaw, so the pod's cgroup stays frozen and whatever starts in it or below it next (a
    restarted container's scope in the same pod slice) is frozen at once."""
    rel = real_root.mkcg("besteffort/pod/ctr")
    proc = real_root.spawn(rel, ["sleep", "60"])
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.freeze("besteffort/pod")
    deadline = time.monotonic() + 10
    events = real_root.path("unified", "besteffort/pod") / "cgroup.events"
    while "frozen 1" not in events.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert writer.kill_all("besteffort/pod") == -1
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert writer.freezer_state("besteffort/pod") == "THAWED"
