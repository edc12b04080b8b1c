"""CPU knobs on pure cgroup v2, through the agent's writer and reader: cpu.max (and cpu.max.burst),
cpu.weight, cpu.idle, cpuset.cpus; each read back from the kernel and, where it can be, seen acting on a
real process."""

from __future__ import annotations

import os
import sys

import pytest
from kit.poll import wait, window
from kit.realcg import RealRoot

from cgroups.errors import InvalidValue
from cgroups.reader import cpu_milli
from cgroups.settings import CpuQuota, Cpuset

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

BUSY = [sys.executable, "-c", "while True: pass"]


def test_cpu_max_is_written_in_the_kernel_format_and_caps_a_busy_loop(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/busy")
    real_root.spawn(rel, BUSY)
    writer, reader = real_root.writer_reader()
    assert writer.set_cpu_quota(rel, 20_000, period_us=50_000)
    assert real_root.text("unified", rel, "cpu.max") == "20000 50000\n"
    knobs = reader.read_knobs(rel)
    assert (knobs.quota_us, knobs.period_us, knobs.shares) == (20_000, 50_000, None)
    assert writer.set_cpu_quota(rel, 20_000, period_us=50_000) is False  # read back equal: not rewritten
    start = reader.sample(rel).nr_throttled
    wait(lambda: reader.sample(rel).nr_throttled > start, 3, every=0.02)  # the quota bites
    first, second = window(lambda: reader.sample(rel), 1.5)
    used = cpu_milli(first, second)
    assert used <= 400 + 150, f"a 400 milli-core quota let the loop use {used:.0f} milli-cores"
    assert second.nr_periods - first.nr_periods >= 10
    assert second.nr_throttled - first.nr_throttled >= 5 and second.throttled_ns > first.throttled_ns
    assert writer.set_cpu_quota(rel, None, period_us=100_000)
    assert real_root.text("unified", rel, "cpu.max") == "max 100000\n"
    assert reader.read_knobs(rel).quota_us is None


def test_cpu_max_burst_rides_on_the_quota(real_root: RealRoot) -> None:
    """The writer has no burst knob: its raw write, and the kernel's rule that a burst fits in the quota."""
    rel = real_root.mkcg("burst")
    writer, _ = real_root.writer_reader()
    writer.set_cpu_quota(rel, 20_000)
    writer.write("cpu", rel, "cpu.max.burst", "10000")
    assert real_root.text("unified", rel, "cpu.max.burst") == "10000\n"
    with pytest.raises(InvalidValue, match=r"cpu\.max\.burst"):
        writer.write("cpu", rel, "cpu.max.burst", "50000")
    writer.write("cpu", rel, "cpu.max.burst", "0")


def test_v2_lets_a_child_quota_exceed_its_parent(real_root: RealRoot) -> None:
    """v1 refuses it (EINVAL); v2 keeps the two independent: the batch goes through in any order."""
    parent, child = "besteffort", real_root.mkcg("besteffort/pod")
    writer, reader = real_root.writer_reader()
    assert writer.apply([CpuQuota(parent, 20_000), CpuQuota(child, 80_000)]) == [True, True]
    assert (reader.read_knobs(parent).quota_us, reader.read_knobs(child).quota_us) == (20_000, 80_000)


def test_shares_become_cpu_weight(real_root: RealRoot) -> None:
    rel = real_root.mkcg("weighted")
    writer, reader = real_root.writer_reader()
    assert real_root.text("unified", rel, "cpu.weight") == "100\n"
    assert writer.set_cpu_shares(rel, 1024)
    assert real_root.text("unified", rel, "cpu.weight") == "39\n"
    assert writer.set_cpu_shares(rel, 2)
    knobs = reader.read_knobs(rel)
    assert (knobs.weight, knobs.shares) == (1, None)


def test_cpu_idle_hides_the_weight_refuses_another_and_gives_it_back(real_root: RealRoot) -> None:
    rel = real_root.mkcg("idle")
    writer, reader = real_root.writer_reader()
    writer.set_cpu_shares(rel, 1024)  # weight 39
    assert writer.set_cpu_idle(rel, True, keep_weight=True)
    knobs = reader.read_knobs(rel)
    assert knobs.cpu_idle is True
    assert knobs.weight == 0, "an idle group reports the kernel's idle weight (3 of 1024: 0 on v2's scale)"
    with pytest.raises(InvalidValue, match=r"cpu\.idle=1"):  # the kernel refuses a weight while idle
        writer.set_cpu_shares(rel, 512)
    assert writer.set_cpu_idle(rel, False, keep_weight=True)
    knobs = reader.read_knobs(rel)
    assert (knobs.cpu_idle, knobs.weight) == (False, 39), "leaving idle, the weight before it is set again"


def test_cpuset_confines_the_tier_and_what_runs_below_it(real_root: RealRoot) -> None:
    """v2 bounds a child by its parent's effective set: the writer writes the tier alone (the cgroups below
    it, a runtime's delegated scopes among them, keep their own cpusets) and the processes below follow."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.fail("the guest has fewer than 2 cpus: the harness boots it with -smp 2")
    parent, child = "besteffort", real_root.mkcg("besteffort/pod")
    proc = real_root.spawn(child, ["sleep", "60"])
    writer, reader = real_root.writer_reader()
    assert reader.read_knobs(child).cpuset == ()  # v2: empty means "the parent's"
    assert real_root.text("unified", child, "cpuset.cpus.effective").strip() == "0-1"
    assert writer.set_cpuset(parent, [1], descendants=True)
    assert real_root.text("unified", parent, "cpuset.cpus") == "1\n"
    assert real_root.text("unified", child, "cpuset.cpus") == "\n", "a cgroup below the tier was written"
    assert real_root.text("unified", child, "cpuset.cpus.effective").strip() == "1"
    assert os.sched_getaffinity(proc.pid) == {1}
    # a child's own set wider than its parent's is taken (v1 refuses it); it gets the overlap
    assert writer.apply([Cpuset(child, (0, 1)), Cpuset(parent, (1,))]) == [True, False]
    assert real_root.text("unified", child, "cpuset.cpus.effective").strip() == "1"
    assert os.sched_getaffinity(proc.pid) == {1}
    assert writer.set_cpuset(parent, [0, 1], descendants=True)
    assert os.sched_getaffinity(proc.pid) == {0, 1}
