"""The workload readers' cheaper sample: memory.stat read again only when the usage moved or its time came,
and v1's cpu.stat left out when nobody reads throttling.

The cadence is tested on a cgroup v2 tree in a temporary directory (exact kernel formats, tests/cgroups/
v2files.py; the files can change under a held usage, which a real cgroup cannot be made to do) with the
reader's clock moved by hand; the usage-moved case and the v1 file set also on real cgroups.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.poll import wait
from kit.realcg import RealRoot, need_v1
from v2files import write_cgroup

import cgroups.reader
from cgroups.discovery import Hierarchy
from cgroups.reader import MEMORY_STAT_MOVE_BYTES, CgroupReader

POD = "pod"
MIB = 1 << 20


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(cgroups.reader, "_monotonic", c)
    return c


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "cgroup"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    write_cgroup(mount / POD, current=200 * MIB, inactive=50 * MIB)
    yield mount


def test_memory_stat_is_read_again_when_the_usage_moves_or_its_time_comes(
        tree: Path, clock: FakeClock) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), "", memory_stat_every_s=5.0)
    assert reader.sample(POD).memory_working_set_bytes == 150 * MIB

    # inactive pages change while the usage holds still: the figure read with that usage stands
    write_cgroup(tree / POD, current=200 * MIB, inactive=80 * MIB)
    clock.now += 1
    assert reader.sample(POD).memory_working_set_bytes == 150 * MIB
    # a move smaller than the threshold: the usage is fresh, the inactive pages are the ones read then
    write_cgroup(tree / POD, current=200 * MIB + MEMORY_STAT_MOVE_BYTES // 2, inactive=80 * MIB)
    assert reader.sample(POD).memory_working_set_bytes == 150 * MIB + MEMORY_STAT_MOVE_BYTES // 2
    # a bigger move: memory.stat is read at once
    write_cgroup(tree / POD, current=200 * MIB + 2 * MEMORY_STAT_MOVE_BYTES, inactive=80 * MIB)
    assert reader.sample(POD).memory_working_set_bytes == 120 * MIB + 2 * MEMORY_STAT_MOVE_BYTES
    # downwards too
    write_cgroup(tree / POD, current=100 * MIB, inactive=10 * MIB)
    assert reader.sample(POD).memory_working_set_bytes == 90 * MIB

    # nothing moves: read again once its time has come, not before
    write_cgroup(tree / POD, current=100 * MIB, inactive=30 * MIB)
    clock.now += 4.9
    assert reader.sample(POD).memory_working_set_bytes == 90 * MIB
    clock.now += 0.1
    assert reader.sample(POD).memory_working_set_bytes == 70 * MIB


def test_by_default_memory_stat_is_read_at_every_sample(tree: Path, clock: FakeClock) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), "")
    assert reader.sample(POD).memory_working_set_bytes == 150 * MIB
    write_cgroup(tree / POD, current=200 * MIB, inactive=80 * MIB)
    assert reader.sample(POD).memory_working_set_bytes == 120 * MIB


def test_a_cgroup_made_again_gets_its_memory_stat_read_again(tree: Path, clock: FakeClock) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), "", memory_stat_every_s=5.0)
    assert reader.sample(POD).memory_working_set_bytes == 150 * MIB
    reader.forget(POD)  # what the collector does with a workload that went
    write_cgroup(tree / POD, current=200 * MIB, inactive=90 * MIB)
    assert reader.sample(POD).memory_working_set_bytes == 110 * MIB


def test_on_v2_throttling_comes_with_the_usage_either_way(tree: Path) -> None:
    write_cgroup(tree / POD, usage=5, periods=10, throttled=3, throttled_usec=7)
    s = CgroupReader(Hierarchy.v2(tree), "", throttling=False).sample(POD)
    assert (s.nr_periods, s.nr_throttled, s.throttled_ns) == (10, 3, 7000)


@pytest.mark.cgroups
def test_v1_without_throttling_reads_no_cpu_stat(real_root: RealRoot) -> None:
    need_v1(real_root, "cpu", "cpuacct", "memory")
    real_root.mkcg(POD)
    (real_root.path("cpu", POD) / "cpu.cfs_quota_us").write_text("1000")
    real_root.spawn(POD, [sys.executable, "-c", "while True: pass"])
    full = CgroupReader(real_root.hierarchy, real_root.name)
    lean = CgroupReader(real_root.hierarchy, real_root.name, throttling=False)
    try:
        assert any(f.endswith("/cpu.stat") for f in full.files(POD))
        assert not any(f.endswith("/cpu.stat") for f in lean.files(POD))
        assert wait(lambda: full.sample(POD).nr_throttled > 0, timeout=10)
        s = lean.sample(POD)
        assert (s.nr_periods, s.nr_throttled, s.throttled_ns) == (0, 0, 0)
        assert s.cpu_usage_ns > 0
    finally:
        full.close()
        lean.close()


HOG = ("import sys\nheld = []\nfor line in sys.stdin:\n"
       "    held.append(bytearray(int(line)))\n    for i in range(0, len(held[-1]), 4096): held[-1][i] = 1\n"
       "    print('ok', flush=True)\n")


@pytest.mark.cgroups
def test_a_workload_that_allocates_is_seen_at_once(real_root: RealRoot) -> None:
    """Real memory cgroup: 64 MiB more anonymous memory shows in the working set at the next sample."""
    real_root.mkcg(POD)
    proc = real_root.spawn(POD, [sys.executable, "-c", HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    assert proc.stdin is not None and proc.stdout is not None
    reader = CgroupReader(real_root.hierarchy, real_root.name, memory_stat_every_s=3600.0)
    try:
        proc.stdin.write(f"{MIB}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        before = reader.sample(POD).memory_working_set_bytes
        assert before is not None
        proc.stdin.write(f"{64 * MIB}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        after = reader.sample(POD).memory_working_set_bytes
        assert after is not None and after - before >= 60 * MIB, (before, after)
    finally:
        reader.close()
