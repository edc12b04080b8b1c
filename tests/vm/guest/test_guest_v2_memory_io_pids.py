"""Memory, I/O and pids knobs on pure cgroup v2: memory.max/high/min/low, io.max and io.weight on the guest's
own disk, pids.max; through the agent's writer (its knobs, or its raw write for what it has no knob for) and
reader, and seen acting on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.poll import holds, wait
from kit.realcg import RealRoot

from cgroups.errors import CgroupError, CgroupGone
from cgroups.parsers import parse_kv
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

MIB = 1 << 20
HOG = "import time\nkeep = [b'x' * (1 << 20) for _ in range({mib})]\ntime.sleep(60)"


def _events(real_root: RealRoot, rel: str, name: str) -> dict[str, int]:
    path = real_root.path("unified", rel) / name
    return parse_kv(path.read_bytes(), str(path))


def test_memory_max_oom_kills_inside_the_limit(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/hog")
    writer, reader = real_root.writer_reader()
    assert writer.set_memory_limit(rel, 48 * MIB)
    assert (real_root.path("unified", rel) / "memory.max").read_text() == f"{48 * MIB}\n"
    assert reader.sample(rel).memory_limit_bytes == 48 * MIB
    assert reader.read_knobs(rel).memory_limit_bytes == 48 * MIB
    hog = real_root.spawn(rel, [sys.executable, "-c", HOG.format(mib=400)])
    assert hog.wait(timeout=60) == -signal.SIGKILL
    assert _events(real_root, rel, "memory.events")["oom_kill"] == 1
    assert writer.set_memory_limit(rel, None)
    assert (real_root.path("unified", rel) / "memory.max").read_text() == "max\n"


def test_memory_high_throttles_without_killing(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/throttled")
    writer, reader = real_root.writer_reader()
    assert writer.set_memory_high(rel, 32 * MIB)
    assert reader.read_knobs(rel).memory_high_bytes == 32 * MIB
    hog = real_root.spawn(rel, [sys.executable, "-c", HOG.format(mib=64)])
    deadline = time.monotonic() + 30
    while _events(real_root, rel, "memory.events")["high"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _events(real_root, rel, "memory.events")["high"] > 0, "memory.high was never crossed"
    assert hog.poll() is None, "memory.high must throttle, not kill"
    assert writer.set_memory_high(rel, None)
    assert reader.read_knobs(rel).memory_high_bytes is None


def test_memory_min_and_low_round_trip(real_root: RealRoot) -> None:
    rel = real_root.mkcg("burstable/protected")
    writer, _ = real_root.writer_reader()
    for name in ("memory.min", "memory.low"):
        writer.write("memory", rel, name, str(16 * MIB + 100))
        assert (real_root.path("unified", rel) / name).read_text() == f"{16 * MIB}\n"  # whole pages
        writer.write("memory", rel, name, "max")
        assert (real_root.path("unified", rel) / name).read_text() == "max\n"
        writer.write("memory", rel, name, "0")


def _dev() -> str:
    """MAJ:MIN of the guest's root disk."""
    rdev = os.stat("/dev/vda").st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


@pytest.fixture
def disk_file() -> Iterator[Path]:
    """A 6 MiB file on the guest's disk (/var/tmp: not the tmpfs /tmp), removed afterwards."""
    fd, name = tempfile.mkstemp(dir="/var/tmp", prefix="coloc-io-")
    try:
        os.write(fd, os.urandom(6 * MIB))
        os.fsync(fd)
        os.close(fd)
        yield Path(name)
    finally:
        os.unlink(name)


def _timed_direct_read(real_root: RealRoot, rel: str, path: Path) -> float:
    """Seconds a process in `rel` takes to read `path` with O_DIRECT (past the page cache, to the disk)."""
    started = time.monotonic()
    proc = real_root.spawn(rel, ["dd", f"if={path}", "of=/dev/null", "bs=256k", "iflag=direct"],
                           stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=60) == 0
    return time.monotonic() - started


def test_io_max_throttles_reads_from_the_guest_disk(real_root: RealRoot, disk_file: Path) -> None:
    dev, data = _dev(), disk_file
    writer, _ = real_root.writer_reader()
    writer.write("unified", "", "cgroup.subtree_control", "+io")  # the root's children get io.*
    rel = real_root.mkcg("reader")
    free = _timed_direct_read(real_root, rel, data)
    assert free < 6 / 2, f"unthrottled, 6 MiB took {free:.1f}s: too slow a disk to tell a 2 MiB/s limit"
    writer.write("io", rel, "io.max", f"{dev} rbps={2 * MIB}")
    assert f"{dev} rbps={2 * MIB} wbps=max riops=max wiops=max" in (
        real_root.path("unified", rel) / "io.max").read_text()
    limited = _timed_direct_read(real_root, rel, data)
    assert limited >= 2.0, f"6 MiB at 2 MiB/s took {limited:.1f}s (unthrottled {free:.1f}s)"
    stat = (real_root.path("unified", rel) / "io.stat").read_text()
    assert stat.startswith(dev) and "rbytes=" in stat
    writer.write("io", rel, "io.max", f"{dev} rbps=max")
    assert dev not in (real_root.path("unified", rel) / "io.max").read_text()


def test_io_weight_default_and_per_device(real_root: RealRoot) -> None:
    """A default weight always; a per-device one only once iocost is on for the disk (EOPNOTSUPP before)."""
    dev = _dev()
    writer, _ = real_root.writer_reader()
    writer.write("unified", "", "cgroup.subtree_control", "+io")
    rel = real_root.mkcg("weighted")
    writer.write("io", rel, "io.weight", "default 50")
    assert (real_root.path("unified", rel) / "io.weight").read_text().splitlines()[0] == "default 50"
    qos = Path("/sys/fs/cgroup/io.cost.qos")
    assert f"{dev} enable=1" not in qos.read_text(), "iocost is already on for the disk"
    with pytest.raises(CgroupError, match="Operation not supported"):
        writer.write("io", rel, "io.weight", f"{dev} 200")
    qos.write_text(f"{dev} enable=1")
    try:
        writer.write("io", rel, "io.weight", f"{dev} 200")
        assert f"{dev} 200" in (real_root.path("unified", rel) / "io.weight").read_text()
    finally:
        qos.write_text(f"{dev} enable=0")


def test_pids_max_refuses_forks_and_the_reader_counts_them(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/forks")
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    writer.write("pids", rel, "pids.max", "4")
    forker = real_root.spawn(rel, [sys.executable, "-c", (
        "import subprocess, sys, time\nkids, refused = [], 0\n"
        "for _ in range(8):\n"
        "    try:\n        kids.append(subprocess.Popen(['sleep', '60']))\n"
        "    except BlockingIOError:\n        refused += 1\n"
        "print(len(kids), refused, flush=True)\ntime.sleep(60)")], stdout=subprocess.PIPE)
    assert forker.stdout is not None
    made, refused = map(int, forker.stdout.readline().split())
    assert (made, refused) == (3, 5)  # the forker itself is one of the 4
    with CgroupReader(real_root.hierarchy, real_root.name, count_pids=True) as reader:
        assert reader.sample(rel).pids == 4
    assert _events(real_root, rel, "pids.events")["max"] >= 5


def test_cgroup_kill_ends_a_frozen_cgroup_at_once(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/pod/ctr")
    procs = [real_root.spawn(rel, ["sleep", "60"]) for _ in range(3)]
    bystander = real_root.spawn(real_root.mkcg("besteffort/other"), ["sleep", "60"])
    writer, reader = real_root.writer_reader()
    events = real_root.path("unified", "besteffort/pod") / "cgroup.events"
    assert writer.freeze("besteffort/pod")
    assert wait(lambda: "frozen 1" in events.read_text())
    assert writer.freezer_state("besteffort/pod") == "FROZEN"
    assert writer.kill_all("besteffort/pod") == -1  # v2: one write to cgroup.kill
    assert [p.wait(timeout=10) for p in procs] == [-signal.SIGKILL] * 3
    # thawed too: a pod slice left frozen would freeze its next container at once (found by this guest)
    assert writer.freezer_state("besteffort/pod") == "THAWED"
    assert wait(lambda: reader.pids(rel) == [])
    assert bystander.poll() is None
    writer.rmdir("besteffort/pod", recursive=True)
    with pytest.raises(CgroupGone):
        reader.sample(rel)


def test_freeze_stops_cpu_and_thaw_resumes_it(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/frozen")
    real_root.spawn(rel, [sys.executable, "-c", "while True: pass"])
    writer, reader = real_root.writer_reader()
    assert writer.freeze(rel)
    assert wait(lambda: "frozen 1" in (real_root.path("unified", rel) / "cgroup.events").read_text())
    first = reader.sample(rel)
    # the counter only grows: below 5 ms at every check over the 0.5 s is below 5 ms at its end
    assert holds(lambda: reader.sample(rel).cpu_usage_ns - first.cpu_usage_ns < 5_000_000, 0.5)
    assert writer.thaw(rel)
    assert wait(lambda: "frozen 0" in (real_root.path("unified", rel) / "cgroup.events").read_text())
    first = reader.sample(rel)
    # the counter only grows: past 20 ms within the 0.5 s is past 20 ms at its end
    assert wait(lambda: reader.sample(rel).cpu_usage_ns - first.cpu_usage_ns > 20_000_000, 0.5)
