"""Reader and writer against a cgroup v2 tree laid out in a temporary directory.

The files carry the exact text the kernel's cgroup v2 interface uses (Documentation/admin-guide/
cgroup-v2.rst): `cpu.stat` with usage_usec/throttled_usec, `cpu.max` "quota period", `memory.current`,
`memory.stat`, `memory.max`/`memory.high` ("max" = none), `*.pressure`, `cgroup.freeze`. This is a
stand-in for a v2 host (this machine is hybrid); the kernel's own checks are tested on real cgroups.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from v2files import write_cgroup

from cgroups.discovery import Hierarchy
from cgroups.errors import CgroupGone, InvalidValue, PathOutsideRoot, UnknownFormat
from cgroups.reader import CgroupReader, cpu_milli, throttled_ratio
from cgroups.settings import CpuIdle, CpuQuota, Cpuset, MemoryHigh
from cgroups.writer import CgroupWriter, shares_to_weight

ROOT = "kubepods.slice"
BE = "kubepods-besteffort.slice"
POD = f"{BE}/kubepods-besteffort-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    mount = tmp_path / "cgroup"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    write_cgroup(mount / ROOT)
    write_cgroup(mount / ROOT / BE)
    write_cgroup(
        mount / ROOT / POD,
        usage=2_000_000,
        periods=10,
        throttled=2,
        throttled_usec=5000,
        limit="536870912",
        psi_avg10=12.5,
        psi_total=777,
    )
    return mount


def test_sample_reads_v2_formats(tree: Path) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), ROOT)
    s = reader.sample(POD)
    assert s.cpu_usage_ns == 2_000_000_000
    assert (s.nr_periods, s.nr_throttled, s.throttled_ns) == (10, 2, 5_000_000)
    assert s.memory_usage_bytes == 157286400
    assert s.memory_working_set_bytes == 157286400 - 31457280
    assert s.memory_limit_bytes == 536870912
    assert s.cpu_pressure is not None and s.cpu_pressure.some_avg10 == 12.5
    assert s.cpu_pressure.some_total_us == 777 and s.cpu_pressure.full_avg10 == 0.0
    assert s.memory_pressure is not None
    assert reader.sample(BE).memory_limit_bytes is None  # "max"


def test_rates_between_two_samples(tree: Path) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), ROOT)
    first = reader.sample(POD)
    write_cgroup(tree / ROOT / POD, usage=2_500_000, periods=20, throttled=7)
    second = reader.sample(POD)  # the kept descriptor sees the new content
    assert second.cpu_usage_ns == 2_500_000_000
    assert throttled_ratio(first, second) == 0.5
    expected_milli = 500_000_000 / (second.at - first.at) / 1e6
    assert cpu_milli(first, second) == pytest.approx(expected_milli)


def test_no_memory_accounting_gives_none(tree: Path) -> None:
    (tree / ROOT / BE / "memory.current").unlink()
    s = CgroupReader(Hierarchy.v2(tree), ROOT).sample(BE)
    assert s.memory_usage_bytes is None and s.memory_working_set_bytes is None
    assert s.cpu_usage_ns == 0


def test_children_pids_exists(tree: Path) -> None:
    (tree / ROOT / POD / "cgroup.procs").write_text("101\n202\n")
    reader = CgroupReader(Hierarchy.v2(tree), ROOT)
    assert reader.children("") == [BE]
    assert reader.children(BE) == [POD]
    assert reader.pids(POD) == [101, 202]
    assert reader.exists(POD) and not reader.exists(f"{BE}/nope")
    assert reader.walk("") == ["", BE, POD]


def test_missing_cgroup_is_gone_not_a_crash(tree: Path) -> None:
    reader = CgroupReader(Hierarchy.v2(tree), ROOT)
    with pytest.raises(CgroupGone, match="nope"):
        reader.sample(f"{BE}/nope")
    with pytest.raises(CgroupGone):
        reader.children(f"{BE}/nope")
    with pytest.raises(CgroupGone):
        CgroupWriter(Hierarchy.v2(tree), ROOT).set_cpu_idle(f"{BE}/nope", True)


def test_unknown_format_names_the_file(tree: Path) -> None:
    (tree / ROOT / POD / "memory.stat").write_text("anon 1\nfile 2\n")
    with pytest.raises(UnknownFormat, match=r"memory\.stat"):
        CgroupReader(Hierarchy.v2(tree), ROOT).sample(POD)
    (tree / ROOT / BE / "cpu.stat").write_text("usage_usec 1\nnr_periods 1\nnr_throttled zero\n")
    with pytest.raises(UnknownFormat, match=r"cpu.stat line 3"):
        CgroupReader(Hierarchy.v2(tree), ROOT).sample(BE)


def test_read_knobs(tree: Path) -> None:
    (tree / ROOT / BE / "cpu.max").write_text("50000 100000\n")
    (tree / ROOT / BE / "cpuset.cpus").write_text("0-1,3\n")
    (tree / ROOT / BE / "cpu.idle").write_text("1\n")
    (tree / ROOT / BE / "memory.high").write_text("1073741824\n")
    k = CgroupReader(Hierarchy.v2(tree), ROOT).read_knobs(BE)
    assert (k.quota_us, k.period_us, k.cpuset, k.cpu_idle) == (50000, 100000, (0, 1, 3), True)
    assert (k.weight, k.shares, k.memory_high_bytes, k.memory_limit_bytes) == (100, None, 1073741824, None)


def _text(tree: Path, rel: str, name: str) -> str:
    return (tree / ROOT / rel / name).read_text()


def test_writer_v2_files(tree: Path) -> None:
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    assert w.set_cpu_quota(BE, 20000)
    assert _text(tree, BE, "cpu.max") == "20000 100000"
    assert w.set_cpu_quota(BE, None, 10000)
    assert _text(tree, BE, "cpu.max") == "max 10000"
    assert w.set_cpu_shares(BE, 1024)
    assert _text(tree, BE, "cpu.weight") == "39"
    assert w.set_cpuset(BE, [2, 0, 1])
    assert _text(tree, BE, "cpuset.cpus") == "0-2"
    assert w.set_cpu_idle(BE, True)
    assert _text(tree, BE, "cpu.idle") == "1"
    assert w.set_memory_limit(POD, 1 << 30)
    assert _text(tree, POD, "memory.max") == "1073741824"
    assert w.set_memory_limit(POD, None)
    assert _text(tree, POD, "memory.max") == "max"
    assert w.set_memory_high(BE, 256 << 20)
    assert _text(tree, BE, "memory.high") == str(256 << 20)
    assert w.freeze(POD) and _text(tree, POD, "cgroup.freeze") == "1"
    assert w.freezer_state(POD) == "FROZEN"
    assert w.thaw(POD) and _text(tree, POD, "cgroup.freeze") == "0"
    assert w.kill_all(POD, signal.SIGKILL) == -1
    assert _text(tree, POD, "cgroup.kill") == "1"


def test_shares_to_weight_matches_the_formula() -> None:
    assert shares_to_weight(2) == 1
    assert shares_to_weight(262144) == 10000
    assert shares_to_weight(1024) == 1 + (1024 - 2) * 9999 // 262142


def test_read_compare_write_skips_and_reasserts(tree: Path) -> None:
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    assert w.set_cpu_quota(BE, 30000) is True
    assert w.set_cpu_quota(BE, 30000) is False  # already there: nothing written
    assert (w.stats.writes, w.stats.skipped, w.stats.reasserted) == (1, 1, 0)
    (tree / ROOT / BE / "cpu.max").write_text("max 100000\n")  # something else (kubelet) rewrote it
    assert w.set_cpu_quota(BE, 30000) is True
    assert _text(tree, BE, "cpu.max") == "30000 100000"
    assert (w.stats.writes, w.stats.reasserted) == (2, 1)
    assert w.stats.last_write_latency_s is not None and w.stats.last_write_latency_s >= 0
    # memory limits are kept in pages: a value in the same page is already applied
    assert w.set_memory_limit(POD, 1 << 30)
    assert w.set_memory_limit(POD, (1 << 30) + 1) is False


def test_apply_batch(tree: Path) -> None:
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    (tree / ROOT / BE / "cpuset.cpus").write_text("0\n")
    (tree / ROOT / POD / "cpuset.cpus").write_text("0\n")
    wrote = w.apply([Cpuset(POD, (1,)), Cpuset(BE, (1,)), CpuIdle(BE, True), MemoryHigh(BE, None)])
    assert wrote == [True, True, True, False]
    assert _text(tree, BE, "cpuset.cpus") == "1" and _text(tree, POD, "cpuset.cpus") == "1"
    assert w.apply([Cpuset(POD, (1,)), Cpuset(BE, (1,))]) == [False, False]


@pytest.mark.parametrize(
    "make",
    [
        lambda: CpuQuota(BE, 500),
        lambda: CpuQuota(BE, 20000, 100),
        lambda: Cpuset(BE, ()),
        lambda: Cpuset(BE, (-1,)),
        lambda: MemoryHigh(BE, -5),
    ],
)
def test_bad_values_are_refused_before_any_write(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidValue):
        make()


def test_bad_values_change_nothing(tree: Path) -> None:
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    before = {n: _text(tree, BE, n) for n in ("cpu.max", "cpu.weight", "memory.max")}
    for call in (
        lambda: w.set_cpu_quota(BE, 10),
        lambda: w.set_cpu_shares(BE, 1),
        lambda: w.set_cpu_shares(BE, 300000),
        lambda: w.set_memory_limit(BE, -1),
    ):
        with pytest.raises(InvalidValue):
            call()
    assert {n: _text(tree, BE, n) for n in before} == before
    assert w.stats.writes == 0


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    write_cgroup(d)
    return d


def _outside_untouched(outside: Path) -> None:
    assert (outside / "cpu.idle").read_text() == "0\n"
    assert (outside / "cpu.max").read_text() == "max 100000\n"
    assert sorted(p.name for p in outside.iterdir() if p.is_dir()) == []


@pytest.mark.parametrize(
    "rel", ["/etc", "../outside", f"{BE}/../../outside", "..", "a/./b", "a//b", "x\x00y"]
)
def test_paths_outside_the_root_are_refused(tree: Path, outside: Path, rel: str) -> None:
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    for call in (
        lambda: w.set_cpu_idle(rel, True),
        lambda: w.set_cpu_quota(rel, 20000),
        lambda: w.mkdir(rel),
        lambda: w.rmdir(rel),
        lambda: w.move_pid(rel, os.getpid()),
        lambda: w.apply([CpuIdle(rel, True)]),
    ):
        with pytest.raises(PathOutsideRoot) as err:
            call()
        assert repr(rel) in str(err.value)
    with pytest.raises(PathOutsideRoot):
        CgroupReader(Hierarchy.v2(tree), ROOT).sample(rel)
    _outside_untouched(outside)
    assert w.stats.writes == 0


def test_symlinks_out_of_the_root_are_refused(tree: Path, outside: Path) -> None:
    (tree / ROOT / "escape").symlink_to(outside)  # a directory link
    (tree / ROOT / BE / "cpu.max").unlink()
    (tree / ROOT / BE / "cpu.max").symlink_to(outside / "cpu.max")  # a file link
    w = CgroupWriter(Hierarchy.v2(tree), ROOT)
    for call in (
        lambda: w.set_cpu_idle("escape", True),
        lambda: w.mkdir("escape/new"),
        lambda: w.set_cpu_quota(BE, 20000),
        lambda: w.apply([CpuIdle(BE, True), CpuIdle("escape", True)]),
    ):
        with pytest.raises(PathOutsideRoot, match="outside the cgroup root"):
            call()
    _outside_untouched(outside)
    assert _text(tree, BE, "cpu.idle") == "0\n"  # the valid half of the batch was not written either
    assert w.stats.writes == 0


def test_symlinked_root_itself_is_followed_consistently(tmp_path: Path, tree: Path) -> None:
    link = tmp_path / "linked-mount"
    link.symlink_to(tree)
    w = CgroupWriter(Hierarchy.v2(link), ROOT)
    assert w.set_cpu_idle(BE, True)
    assert _text(tree, BE, "cpu.idle") == "1"
