"""The local evictor on real cgroups: a workload laid out like a pod (processes in child cgroups) is
killed whole, SIGKILL follows SIGTERM after the grace period, and done means every cgroup.procs is empty."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from kit.realcg import RealRoot

from agent.executors.process_kill import kill_cgroup
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.cgroups]

IGNORE_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('ready', flush=True); time.sleep(60)")


async def test_kills_processes_in_child_cgroups_and_escalates(real_root: RealRoot) -> None:
    real_root.mkcg("besteffort/pod1/ctr-a")
    real_root.mkcg("besteffort/pod1/ctr-b")
    real_root.mkcg("besteffort/other")
    a = real_root.spawn("besteffort/pod1/ctr-a", ["sleep", "60"])
    b = real_root.spawn("besteffort/pod1/ctr-b", [sys.executable, "-c", IGNORE_TERM], stdout=subprocess.PIPE)
    assert b.stdout is not None and b.stdout.readline().strip() == b"ready"
    keep = real_root.spawn("besteffort/other", ["sleep", "60"])
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    try:
        out = await kill_cgroup(reader, writer, "besteffort/pod1", grace_period_s=0.5)
    finally:
        reader.close()
    assert out.ok, out.detail
    assert out.escalated, "the process ignoring SIGTERM needed SIGKILL"
    assert a.wait(5) == -signal.SIGTERM
    assert b.wait(5) == -signal.SIGKILL
    assert keep.poll() is None, "a neighbour outside the victim's cgroup was touched"
    os.kill(keep.pid, 0)


async def test_a_gone_cgroup_is_done_not_an_error(real_root: RealRoot) -> None:
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    try:
        out = await kill_cgroup(reader, writer, "besteffort/never-was", grace_period_s=0.1)
    finally:
        reader.close()
    assert out.ok and out.detail == "cgroup gone"
