"""The disk guard (`agent/executors/io_guard.py`) on the real kernel (v1 blkio here, v2 io in the guest): what
it reads (HP as the root less the BE tier, each workload's IO, the caps in force), the caps that bound the
policy (another writer's from before the agent, the NodeSLO's BE device blocks by device name), and a clean
exit that puts back what was there before."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.diskio import be_cap, can_cap, commit_argv, flood_argv, on_disk, written
from kit.loopdisk import LoopUnavailable, loop_disk
from kit.realcg import RealRoot
from kit.snapshot import node_snapshot

from agent.config.io import IoConfig
from agent.executors.io_guard import BE_IO, IoGuard, NodeSloBlkio
from cgroups.holdings import Journal
from cgroups.io import IoLimit
from cgroups.io_meter import IoMeter
from cgroups.writer import CgroupWriter
from qos.actions import SetBeIoLimit
from qos.io import IoPolicyConfig, IoState, decide
from qos.model import NO_CAP, IoCap, Source, Tier, Workload

pytestmark = [pytest.mark.cgroups]


def _workload(key: str, rel: str, be: bool) -> Workload:
    return Workload(key, key, Source.LOCAL, Tier.BESTEFFORT if be else Tier.GUARANTEED, be, 0, rel)


def _node_of(dev: str) -> str:
    """The device node of disk `dev` (e.g. /dev/vda)."""
    for line in Path(f"/sys/dev/block/{dev}/uevent").read_text().splitlines():
        if line.startswith("DEVNAME="):
            return "/dev/" + line.removeprefix("DEVNAME=")
    raise LookupError(dev)


def _record(*args: object) -> object:
    return args


def test_the_guard_reads_hp_be_and_each_workload_and_bounds_by_what_it_found(
        real_root: RealRoot, tmp_path: Path) -> None:
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    for rel in ("be", "be/batch", "hp"):
        real_root.mkcg(rel)
    with on_disk() as (disk, dev):
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=Journal(tmp_path / "held", "b"))
        writer.set_io_limit("be", dev, IoLimit(riops=7000))  # an operator's, before the agent
        caps = {_node_of(dev): IoCap(wbps=50_000_000), "/dev/no-such-disk": IoCap(rbps=1)}
        note = "beClass.blkioQOS.blocks[1] (podvolume data): not acted on"
        nodeslo = NodeSloBlkio(lambda: caps, lambda: [note])
        guard, why = IoGuard.build(IoConfig(devices=(dev,)), writer, "be", nodeslo)
        assert guard is not None, why
        ws = (_workload("local/batch", "be/batch", True), _workload("local/hp", "hp", False))
        flood = real_root.spawn("be/batch", flood_argv(disk / "be.out"), stderr=subprocess.DEVNULL,
                                start_new_session=True)
        hp = real_root.spawn("hp", commit_argv(disk / "hp.out"))
        try:
            guard.sample(ws)
            deadline = time.monotonic() + 20  # both started (an interpreter's start is slow under emulation)
            while True:
                for _ in range(5):
                    time.sleep(0.1)
                    guard.poll()
                s = guard.sample(ws)
                d = s.disks[0]
                ready = d.hp is not None and d.hp.wiops > 10 and "local/hp" in s.by_workload
                if ready or time.monotonic() > deadline:
                    break
        finally:
            _stop(flood)
            hp.kill()
            hp.wait(10)
        (d,) = s.disks
        assert d.dev == dev and d.hp is not None and d.be is not None
        assert d.be.wbps > 1e6 and d.hp.wiops > 10, (d.be, d.hp)  # the flood is BE's, the commits HP's
        assert d.hp.wbps < d.be.wbps
        assert d.hp_idle_s is not None and d.hp_idle_s < 0.5
        assert d.cap == IoCap(riops=7000)
        assert s.static == {dev: IoCap(wbps=50_000_000, riops=7000)}  # the NodeSLO's within the operator's
        assert s.notes == ("NodeSLO blkioQOS device /dev/no-such-disk: no such disk on this node",
                           "beClass.blkioQOS.blocks[1] (podvolume data): not acted on")
        assert s.by_workload["local/batch"].wbps > 1e6 and s.by_workload["local/hp"].wiops > 10
        # the agent's cap, then a clean exit: the operator's is back
        rec = guard.submit(SetBeIoLimit(dev, IoCap(20_000_000, 20_000_000, 400, 400), "test"), False,
                           _record)  # type: ignore[arg-type]
        assert rec is not None and be_cap(real_root, "be", dev) == (20_000_000, 20_000_000, 400, 400)
        assert (f"io_max@{dev}", "be") in writer.journal.held
        assert writer.journal.held[(f"io_max@{dev}", "be")].holder == BE_IO.name
        assert guard.submit(SetBeIoLimit(dev, IoCap(20_000_000, 20_000_000, 400, 400), "again"), False,
                            _record) is None  # type: ignore[arg-type]
        assert guard.release()
        assert be_cap(real_root, "be", dev) == (None, None, 7000, None)
        assert writer.journal.held == {}


def test_no_guard_where_there_is_nothing_to_guard(real_root: RealRoot, tmp_path: Path) -> None:
    real_root.mkcg("be")
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    guard, why = IoGuard.build(IoConfig(paths=("/dev/shm", str(tmp_path / "missing"))), writer, "be")
    assert guard is None and "no disk to guard" in why
    if can_cap(real_root):
        guard, why = IoGuard.build(IoConfig(devices=("254:0",)), writer, "not-there")
        assert guard is None and "the BE tier has no IO cgroup" in why
    assert NO_CAP.none


def _written_mb_per_s(root: RealRoot, rel: str, dev: str, target: Path, seconds: float = 1.5) -> float:
    """MB/s a flood in `rel` wrote, as the kernel charged `rel`."""
    flood = root.spawn(rel, flood_argv(target), stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        before, started = written(root, rel, dev), time.monotonic()
        time.sleep(seconds)
        return (written(root, rel, dev) - before) / (time.monotonic() - started) / 1e6
    finally:
        _stop(flood)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The flood's shell and its dd (one process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_cap_on_the_be_tier_holds_the_yarn_containers_below_it(real_root: RealRoot, tmp_path: Path) -> None:
    """YARN's containers live below the BE tier (`besteffort/hadoop-yarn/container_*`): the tier's cap holds
    them as it holds BE pods. v2's throttling is hierarchical; v1's is not (without the guard's spreading a
    container below a capped tier writes at the disk's speed): there each leaf gets its share, and a
    container that starts while the cap is in force gets one at the next tick."""
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    yarn = "be/hadoop-yarn/container_e01_1700000000000_0001_01_00000"
    first = real_root.mkcg(yarn + "2")
    with on_disk() as (disk, dev):
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=Journal(tmp_path / "held", "b"))
        guard, why = IoGuard.build(IoConfig(devices=(dev,)), writer, "be")
        assert guard is not None, why
        assert guard.submit(SetBeIoLimit(dev, IoCap(wbps=4_000_000), "test"), False, _record) is not None
        rate = _written_mb_per_s(real_root, first, dev, disk / "a.out")
        assert 0.5 < rate < 4 * 1.6, f"{rate:.1f} MB/s below a 4 MB/s cap on the tier"
        # a second container starts while the cap is in force: the two together are held to it
        second = real_root.mkcg(yarn + "3")
        floods = [real_root.spawn(rel, flood_argv(disk / f"{n}.out"), stderr=subprocess.DEVNULL,
                                  start_new_session=True) for n, rel in enumerate((first, second))]
        try:
            time.sleep(0.2)
            guard.follow()  # the tick after it started
            if real_root.hierarchy.is_v1("blkio"):
                assert be_cap(real_root, second, dev)[1] == 2_000_000  # two busy leaves: half each
            before, started = written(real_root, "be", dev), time.monotonic()
            time.sleep(1.5)
            rate = (written(real_root, "be", dev) - before) / (time.monotonic() - started) / 1e6
        finally:
            for f in floods:
                _stop(f)
        assert 0.5 < rate < 4 * 1.6, f"{rate:.1f} MB/s below a 4 MB/s cap, two containers"
        assert guard.release()
        assert be_cap(real_root, first, dev) == (None, None, None, None)
        assert be_cap(real_root, "be", dev) == (None, None, None, None)
        assert writer.journal.held == {}


def test_the_meter_reads_through_open_files_and_a_removed_cgroup_reads_as_gone(real_root: RealRoot) -> None:
    if not can_cap(real_root):
        pytest.skip("no IO controller (v1 blkio, or io on pure v2)")
    rel = real_root.mkcg("w")
    meter = IoMeter(real_root.hierarchy, real_root.name)
    try:
        assert meter.stat(rel) is not None and meter.stat(rel) is not None
        assert len(meter._fds) >= 1  # opened once, read again with pread
        for d in real_root.dirs(rel):
            d.rmdir()
        assert meter.stat(rel) is None  # the kernel's ENODEV on the open file: gone, no error
        assert meter.stat("never-made") is None
        meter.stat("")
        meter.forget([rel, ""])
        assert meter._fds == {}
    finally:
        meter.close()


def test_a_dry_run_records_the_cap_and_writes_nothing(real_root: RealRoot, tmp_path: Path) -> None:
    if not can_cap(real_root):
        pytest.skip("no IO controller (v1 blkio, or io on pure v2)")
    real_root.mkcg("be/batch")
    with on_disk() as (_, dev):
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=Journal(tmp_path / "held", "b"))
        guard, why = IoGuard.build(IoConfig(devices=(dev,)), writer, "be")
        assert guard is not None, why
        rec = guard.submit(SetBeIoLimit(dev, IoCap(wbps=4_000_000), "HP waits"), True, _record)
        assert rec is not None and rec[3] == "dry_run"  # type: ignore[index]
        assert be_cap(real_root, "be", dev) == (None, None, None, None)
        assert be_cap(real_root, "be/batch", dev) == (None, None, None, None)
        assert writer.journal.held == {}
        assert guard.stats.by_dev == {dev: IoCap(wbps=4_000_000)}  # the wake test compares with it


HP_READER = """
import mmap, os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf, blocks = mmap.mmap(-1, 4096), os.fstat(fd).st_size // 4096
while True:
    os.preadv(fd, [buf], random.randrange(blocks) * 4096)
    time.sleep(0.002)
"""


def _fill(path: Path, mib: int) -> None:
    with path.open("wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())


def test_on_a_fresh_disk_the_guard_sees_hp_reading_and_holds_be_s_reads_to_the_read_floor(
        real_root: RealRoot, tmp_path: Path) -> None:
    """A loop device no throttle rule was ever written for (v1 counts no IO per cgroup on it until one is:
    the guard has the kernel count it), HP reading 4 KiB at random and BE reading 1 MiB after 1 MiB: the
    guard sees both, the policy cuts BE to the floor, reads and writes each to their own, and the kernel
    holds BE's reads to the read floor."""
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    real_root.mkcg("be/batch")
    real_root.mkcg("hp")
    with on_disk() as (parent, _), contextlib.ExitStack() as stack:
        try:
            loop = stack.enter_context(loop_disk(parent, 160))
        except LoopUnavailable as err:
            pytest.skip(f"no loop device here: {err}")
        _fill(loop.mount / "be.dat", 64)
        _fill(loop.mount / "hp.dat", 16)
        policy = IoPolicyConfig(stall_percent=0, floor_read_mbps=2, floor_mbps=10)
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=Journal(tmp_path / "held", "b"))
        guard, why = IoGuard.build(IoConfig(devices=(loop.dev,), policy=policy), writer, "be")
        assert guard is not None, why
        stack.callback(guard.close)
        ws = (_workload("local/batch", "be/batch", True), _workload("local/hp", "hp", False))
        dd = f"dd if={loop.mount}/be.dat of=/dev/null bs=1M iflag=direct status=none"
        flood = real_root.spawn("be/batch", ["sh", "-c", f"while {dd}; do :; done"],
                                stderr=subprocess.DEVNULL, start_new_session=True)
        stack.callback(_stop, flood)
        hp = real_root.spawn("hp", [sys.executable, "-c", HP_READER, str(loop.mount / "hp.dat")])
        stack.callback(hp.wait, 10)
        stack.callback(hp.kill)
        guard.sample(ws)
        deadline = time.monotonic() + 20
        while True:
            for _ in range(4):
                time.sleep(0.1)
                guard.poll()
            s = guard.sample(ws)
            d = s.disks[0]
            if (d.hp is not None and d.be is not None and d.hp.riops > 20 and d.be.rbps > 5e6) \
                    or time.monotonic() > deadline:
                break
        assert d.hp is not None and d.be is not None and d.hp.riops > 20 and d.be.rbps > 5e6, (d.hp, d.be)
        snap = node_snapshot(ws, taken_at=time.monotonic(), io=s)
        acts, _ = decide(snap, policy, IoState())
        (act,) = [a for a in acts if isinstance(a, SetBeIoLimit)]
        assert act.cap == IoCap(2_000_000, 10_000_000, 400, 400)
        assert guard.submit(act, False, _record) is not None  # type: ignore[arg-type]
        assert be_cap(real_root, "be", loop.dev) == (2_000_000, 10_000_000, 400, 400)
        time.sleep(0.5)  # the dd in flight when the cap came ends
        before, started = (guard._meter.stat("be") or {})[loop.dev].rbytes, time.monotonic()
        time.sleep(2.0)
        rate = ((guard._meter.stat("be") or {})[loop.dev].rbytes - before) / (time.monotonic() - started)
        assert 0.5e6 < rate < 2e6 * 1.6, f"BE read {rate / 1e6:.1f} MB/s below a 2 MB/s read floor"
        assert guard.release()
        assert be_cap(real_root, "be", loop.dev) == (None, None, None, None)
        assert be_cap(real_root, "be/batch", loop.dev) == (None, None, None, None)


def test_the_guard_polls_fast_only_while_be_does_more_io_than_its_floor(
        real_root: RealRoot, tmp_path: Path) -> None:
    """BE idle on the disk: the guard reads it every `calm_poll_s`; BE writing 1 MiB after 1 MiB (far above
    the 10 MB/s write floor): every `poll_s`, where HP starting to wait behind it is then seen soonest."""
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    real_root.mkcg("be/batch")
    with on_disk() as (d, dev), contextlib.ExitStack() as stack:
        writer = CgroupWriter(real_root.hierarchy, real_root.name, journal=Journal(tmp_path / "held", "b"))
        cfg = IoConfig(devices=(dev,), poll_s=0.02, calm_poll_s=0.1)
        guard, why = IoGuard.build(cfg, writer, "be")
        assert guard is not None, why
        stack.callback(guard.close)
        assert guard.period() == 0.02  # no reading yet: fast until there is one
        guard.poll()
        time.sleep(0.2)
        guard.poll()
        assert guard.period() == 0.1
        flood = real_root.spawn("be/batch", flood_argv(d / "be.dat", 16), stderr=subprocess.DEVNULL,
                                start_new_session=True)
        stack.callback(_stop, flood)
        deadline = time.monotonic() + 20
        while guard.period() != 0.02 and time.monotonic() < deadline:
            time.sleep(0.1)
            guard.poll()
        assert guard.period() == 0.02, "BE flooding the disk, the guard still polls calmly"
        _stop(flood)
        time.sleep(0.3)
        guard.poll()
        time.sleep(0.2)
        guard.poll()
        assert guard.period() == 0.1
