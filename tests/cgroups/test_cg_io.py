"""Disk IO caps and usage of a cgroup (`cgroups/io.py`) on the real kernel: v1 `blkio` here, v2 `io` in the
cgroup v2 + systemd guest (tests/vm/selection): a cap written through the one writer holds a real direct-IO
writer to it, is journaled as a holding, and is given back; the files' formats as the kernel writes them;
the disk behind a directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.loopdisk import LoopDisk, LoopUnavailable, loop_disk
from kit.realcg import RealRoot

from cgroups.errors import InvalidValue, UnknownFormat
from cgroups.holdings import Holder, Journal
from cgroups.io import (
    NO_LIMIT,
    IoLimit,
    IoStat,
    disk_of,
    disks_of,
    format_io_max,
    parse_blkio,
    parse_io_max,
    parse_io_stat,
)
from cgroups.io_meter import IoMeter
from cgroups.knobs import io_max
from cgroups.writer import CgroupWriter

MB = 1_000_000
IO = Holder("test_io")


def test_io_max_lines_are_read_and_written_as_the_kernel_does() -> None:
    data = (b"8:16 rbps=2097152 wbps=max riops=max wiops=120\n"
            b"254:0 rbps=max wbps=10485760 riops=max wiops=max\n")
    assert parse_io_max(data, "8:16") == IoLimit(rbps=2097152, wiops=120)
    assert parse_io_max(data, "254:0") == IoLimit(wbps=10485760)
    assert parse_io_max(data, "8:0") == NO_LIMIT
    assert format_io_max("254:0", IoLimit(wbps=10 * MB)) == "254:0 rbps=max wbps=10000000 riops=max wiops=max"
    with pytest.raises(UnknownFormat, match=r"io\.max"):
        parse_io_max(b"8:16 rbps=fast\n", "8:16")
    for bad in ("8:0 ", "sda", "../8:0", 8):
        with pytest.raises(InvalidValue, match="MAJ:MIN"):
            io_max(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="wbps"):
        IoLimit(wbps=0)


def test_io_usage_is_read_from_v2_io_stat_and_v1_blkio() -> None:
    v2 = b"254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n8:0 rbytes=1 wbytes=0 rios=1 wios=0\n"
    assert parse_io_stat(v2) == {"254:0": IoStat(4096, 8192, 1, 2), "8:0": IoStat(1, 0, 1, 0)}
    service = (b"254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 0\n254:0 Async 12288\n254:0 Total 12288\n"
               b"Total 12288\n")
    serviced = b"254:0 Read 1\n254:0 Write 2\n254:0 Sync 0\n254:0 Async 3\n254:0 Total 3\nTotal 3\n"
    assert parse_blkio(service, serviced) == {"254:0": IoStat(4096, 8192, 1, 2)}
    with pytest.raises(UnknownFormat, match=r"io\.stat"):
        parse_io_stat(b"sda rbytes=1\n")


def test_the_disk_behind_a_directory_is_a_whole_disk_and_virtual_ones_are_none(tmp_path: Path) -> None:
    # a fake /sys/dev/block: 8:1 a partition of the disk 8:0, 7:0 a loop device
    sysfs = tmp_path / "sys"
    disk = sysfs / "devices/pci0000:00/block/sda"
    (disk / "sda1").mkdir(parents=True)
    (disk / "dev").write_text("8:0\n")
    (disk / "sda1/dev").write_text("8:1\n")
    (disk / "sda1/partition").write_text("1\n")
    loop = sysfs / "devices/virtual/block/loop0"
    loop.mkdir(parents=True)
    (loop / "dev").write_text("7:0\n")
    links = sysfs / "dev/block"
    links.mkdir(parents=True)
    (links / "8:1").symlink_to(disk / "sda1")
    (links / "8:0").symlink_to(disk)
    (links / "7:0").symlink_to(loop)
    assert disk_of(os.makedev(8, 1), links) == "8:0"
    assert disk_of(os.makedev(8, 0), links) == "8:0"
    assert disk_of(os.makedev(7, 0), links) is None
    assert disk_of(os.makedev(0, 42), links) is None  # tmpfs, overlay: no block device
    # this machine: the directory the tests run in is on a real disk; /dev/shm is on none
    here = disks_of([str(tmp_path), "/dev/shm", str(tmp_path / "missing")])
    assert len(here) <= 1 and all(Path(f"/sys/dev/block/{d}/device").exists() for d in here), here


@pytest.fixture
def be(real_root: RealRoot) -> tuple[str, Path | None]:
    """The cgroup `be` below the test's root (in v1's blkio hierarchy too): its name, and its v1 blkio
    directory (None on v2)."""
    rel = real_root.mkcg("be")
    mount = real_root.hierarchy.v1.get("blkio")
    return rel, (mount / real_root.name / rel if mount is not None else None)


def _cap_holds_a_direct_writer(real_root: RealRoot, be: tuple[str, Path | None], target: Path) -> float:
    """MB/s a `dd oflag=direct` in `be` wrote to `target` in 1.5 s."""
    rel = be[0]
    dd = f"exec dd if=/dev/zero of={target} bs=256k oflag=direct count=100000"
    proc = real_root.spawn(rel, ["sh", "-c", dd], stderr=subprocess.DEVNULL)
    started = time.monotonic()
    time.sleep(1.5)
    size = target.stat().st_size if target.exists() else 0
    elapsed = time.monotonic() - started
    proc.kill()
    proc.wait(10)
    return size / elapsed / MB


@pytest.fixture
def on_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory of the test's own on a real disk: the test's, else one below /var/tmp (the guest's /tmp is
    a tmpfs), removed afterwards."""
    if disk_of(os.stat(tmp_path).st_dev) is not None:
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="coloc-test-io-", dir="/var/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_cap_through_the_writer_holds_a_real_direct_writer_and_is_given_back(
        real_root: RealRoot, on_disk: Path, be: tuple[str, Path | None]) -> None:
    tmp_path = on_disk
    dev = disk_of(os.stat(tmp_path).st_dev)
    if dev is None:
        pytest.skip("neither the test directory nor /var/tmp is on a disk")
    if not (real_root.hierarchy.is_v1("blkio") or real_root.hierarchy.mode == "v2"):
        pytest.skip("no blkio (v1) or io (v2) controller")
    rel = be[0]
    path = tmp_path / "journal"
    journal = Journal(path, "boot-1")
    w = CgroupWriter(real_root.hierarchy, real_root.name, journal=journal)
    with w.held_by(IO):
        assert w.set_io_limit(rel, dev, IoLimit(wbps=4 * MB))
    assert w.set_io_limit(rel, dev, IoLimit(wbps=4 * MB)) is False, "read-compare-write"
    assert (("io_max@" + dev, rel) in journal.held) and journal.stats.writes == 1
    rate = _cap_holds_a_direct_writer(real_root, be, tmp_path / "be.out")
    assert 0.5 < rate < 4 * 1.5, f"{rate:.1f} MB/s beside a 4 MB/s cap"
    # the next run (this one killed meanwhile) does not hold it: given back, the files as before
    again = Journal(path, "boot-1")
    again.load()
    w2 = CgroupWriter(real_root.hierarchy, real_root.name, journal=again)
    assert w2.settle(IO) == 1 and again.held == {}
    assert io_max(dev).read(w2, rel) == NO_LIMIT



@pytest.fixture
def loop(on_disk: Path) -> Iterator[LoopDisk]:
    """A fresh loop device (direct IO, ext4 mounted), removed afterwards; skipped where none can be made."""
    made = loop_disk(on_disk, 64)
    try:
        disk = made.__enter__()
    except LoopUnavailable as err:
        pytest.skip(f"no loop device here: {err}")
    try:
        yield disk
    finally:
        made.__exit__(None, None, None)


def test_the_meter_has_the_kernel_count_a_fresh_disks_io_and_caps_nothing(
        real_root: RealRoot, be: tuple[str, Path | None], loop: LoopDisk) -> None:
    # a fresh loop device: no throttle rule was ever written for it, by anyone (the host's disk had one,
    # which is why the guard's v1 counters worked there and read 0 on a loop device before count_on)
    if not real_root.hierarchy.is_v1("blkio"):
        pytest.skip("v1 blkio only: v2's io.stat counts every disk")
    rel, blkio = be
    assert blkio is not None
    root_dir = blkio.parent
    meter = IoMeter(real_root.hierarchy, real_root.name)
    try:
        assert meter.count_on(loop.dev) is True
        assert meter.count_on(loop.dev) is True, "no rule is left behind: it is written again"
        for f in ("read_bps_device", "write_bps_device", "read_iops_device", "write_iops_device"):
            assert loop.dev not in (root_dir / f"blkio.throttle.{f}").read_text(), f"a {f} rule was set"
        dd = ["dd", "if=/dev/zero", f"of={loop.mount}/be.out", "bs=1M", "count=8", "oflag=direct",
              "status=none"]
        proc = real_root.spawn(rel, dd)
        assert proc.wait(60) == 0
        counted = meter.stat(rel) or {}
        assert loop.dev in counted and counted[loop.dev].wbytes >= 8 << 20, counted
        # a rule in place is kept: count_on never lifts another writer's cap
        (root_dir / "blkio.throttle.read_bps_device").write_text(f"{loop.dev} 4000000")
        assert meter.count_on(loop.dev) is False
        assert f"{loop.dev} 4000000" in (root_dir / "blkio.throttle.read_bps_device").read_text()
        (root_dir / "blkio.throttle.read_bps_device").write_text(f"{loop.dev} 0")
    finally:
        meter.close()
