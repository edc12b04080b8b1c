"""Reader and writer on this machine's real cgroups (v1 controllers + the cgroup2 mount for PSI).

Every test works under a private `coloc-test-<uuid>` root (the `real_root` fixture) with real
processes, and leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.poll import holds, settled, wait, window
from kit.realcg import RealRoot, need_v1

from cgroups.errors import CgroupBusy, CgroupError, CgroupGone, InvalidValue
from cgroups.node import NodeCpuMeter, read_meminfo
from cgroups.parsers import parse_psi
from cgroups.reader import CgroupReader, cpu_milli, throttled_ratio
from cgroups.settings import CpuQuota, Cpuset
from cgroups.writer import CgroupWriter

pytestmark = pytest.mark.cgroups

BUSY = [sys.executable, "-c", "while True: pass"]
SLEEP = ["sleep", "60"]


@pytest.mark.xdist_group("cpu")
def test_busy_process_usage_rises_then_quota_throttles_it(real_root: RealRoot) -> None:
    need_v1(real_root, "cpu", "cpuacct")
    # The figures below need the busy loop to get its share on a machine others keep busy: the test's own
    # root outweighs the root cgroup's tasks (each 1024) the way a kubepods root outweighs them on a node.
    (real_root.path("cpu") / "cpu.shares").write_text("16384")
    rel = real_root.mkcg("besteffort/busy")
    real_root.spawn(rel, BUSY)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    first, second = window(lambda: reader.sample(rel), 0.6)
    free = cpu_milli(first, second)
    assert free > 250, f"a busy loop should get a good part of a core, got {free:.0f} milli-cores"
    assert second.nr_throttled == first.nr_throttled  # no quota, no throttling

    assert writer.set_cpu_quota(rel, 10_000)  # 0.1 CPU per 100 ms period
    wait(lambda: reader.sample(rel).nr_throttled > second.nr_throttled, 2, every=0.02)  # the cap bites
    first, second = window(lambda: reader.sample(rel), 1.0)
    capped = cpu_milli(first, second)
    assert 50 <= capped <= 150, f"usage should fall to the 100 milli-core quota, got {capped:.0f}"
    assert second.nr_throttled - first.nr_throttled >= 5
    assert second.throttled_ns > first.throttled_ns
    ratio = throttled_ratio(first, second)
    assert ratio is not None and ratio > 0.5
    # the parent tier sees the child's usage (hierarchical accounting)
    assert reader.sample("besteffort").cpu_usage_ns >= second.cpu_usage_ns
    knobs = reader.read_knobs(rel)
    assert (knobs.quota_us, knobs.period_us) == (10_000, 100_000)


def test_memory_limit_caps_usage(real_root: RealRoot) -> None:
    need_v1(real_root, "memory")
    rel = real_root.mkcg("besteffort/hog")
    limit = 48 << 20
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.set_memory_limit(rel, limit)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    assert reader.sample(rel).memory_limit_bytes == limit
    hog = real_root.spawn(
        rel,
        [sys.executable, "-c", "import time\nkeep = [b'x' * (1 << 20) for _ in range(400)]\ntime.sleep(30)"],
    )
    peak = 0
    while hog.poll() is None:  # sample while it allocates past the limit
        try:
            usage = reader.sample(rel).memory_usage_bytes
        except CgroupGone:
            break
        peak = max(peak, usage or 0)
        time.sleep(0.01)
    assert hog.wait(timeout=20) == -signal.SIGKILL  # 400 MiB do not fit in 48 MiB: the OOM killer ends it
    assert 0 < peak <= limit
    mem = real_root.path("memory", rel)
    assert int((mem / "memory.max_usage_in_bytes").read_text()) <= limit
    assert int((mem / "memory.failcnt").read_text()) > 0
    assert "oom_kill 1" in (mem / "memory.oom_control").read_text()


def test_leaving_idle_gives_the_weight_back_without_taking_the_kernels_reset_for_another_writer(
        real_root: RealRoot) -> None:
    """Leaving `cpu.idle`, the kernel resets the weight to its default (shares 1024); the writer sets the
    weight it held again. That reset is the kernel's, not another writer's: no override may be noted (a
    warning and a count in /metrics at every agent shutdown on a tier it laid out itself, before)."""
    rel = real_root.mkcg("besteffort")
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    if not writer.has_file("cpu", rel, "cpu.idle"):
        pytest.skip("this kernel has no cpu.idle")
    assert writer.set_cpu_shares(rel, 2)  # the kubelet's BestEffort weight
    assert writer.set_cpu_idle(rel, True, keep_weight=True)
    assert writer.set_cpu_idle(rel, False, keep_weight=True)
    knobs = CgroupReader(real_root.hierarchy, real_root.name).read_knobs(rel)
    assert knobs.shares == 2 if real_root.hierarchy.is_v1("cpu") else knobs.weight == 1  # v2: shares 2 → 1
    assert list(writer.overrides) == [] and not writer.override_counts


def test_v1_knobs_round_trip(real_root: RealRoot) -> None:
    need_v1(real_root, "cpu", "memory", "cpuset")
    rel = real_root.mkcg("besteffort")
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.set_cpu_shares(rel, 2)
    assert writer.set_cpu_idle(rel, True)
    assert writer.set_memory_high(rel, 64 << 20)  # v1: the soft limit
    assert writer.set_cpuset(rel, [0])
    knobs = CgroupReader(real_root.hierarchy, real_root.name).read_knobs(rel)
    assert (knobs.cpu_idle, knobs.memory_high_bytes, knobs.cpuset) == (True, 64 << 20, (0,))
    assert knobs.shares == 3  # an idle group reports the kernel's fixed idle weight ...
    with pytest.raises(InvalidValue, match=r"cpu\.idle=1"):  # ... and refuses another one
        writer.set_cpu_shares(rel, 512)
    assert writer.set_cpu_idle(rel, False)
    # leaving idle, the kernel resets the weight to the default: the caller must set shares again
    assert CgroupReader(real_root.hierarchy, real_root.name).read_knobs(rel).shares == 1024
    assert writer.set_cpu_shares(rel, 2)
    assert (real_root.path("memory", rel) / "memory.soft_limit_in_bytes").read_text().strip() == str(64 << 20)
    # v1 keeps limits in pages: a value inside the same page reads back rounded and is not rewritten
    assert writer.set_memory_limit(rel, (100 << 20) + 1000)
    assert writer.set_memory_limit(rel, (100 << 20) + 1000) is False
    assert writer.set_cpu_quota(rel, 50_000, period_us=10_000)  # 5 CPUs: the period changes first
    assert (real_root.path("cpu", rel) / "cpu.cfs_period_us").read_text().strip() == "10000"
    assert (real_root.path("cpu", rel) / "cpu.cfs_quota_us").read_text().strip() == "50000"


def test_safe_order_for_cpuset_and_quota(real_root: RealRoot) -> None:
    """v1 refuses a child outside its parent; apply() must order writes so each step is valid."""
    need_v1(real_root, "cpuset", "cpu")
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs cpus 0 and 1")
    parent, child = "besteffort", real_root.mkcg("besteffort/pod")
    real_root.spawn(child, SLEEP)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    # shrinking the parent before its child is refused by the kernel ...
    with pytest.raises(CgroupBusy):
        writer.set_cpuset(parent, [1])
    # ... so apply() shrinks child-first (the batch order given is the naive one)
    assert writer.apply([Cpuset(parent, (1,)), Cpuset(child, (1,))]) == [True, True]
    assert reader.read_knobs(parent).cpuset == reader.read_knobs(child).cpuset == (1,)
    # widening the child before its parent is refused too; apply() widens parent-first
    with pytest.raises(InvalidValue, match="not within the parent"):
        writer.set_cpuset(child, [0, 1])
    assert writer.apply([Cpuset(child, (0, 1)), Cpuset(parent, (0, 1))]) == [True, True]
    # moving both from {1} to {0} needs the union first: parent-first widen, child-first shrink
    writer.apply([Cpuset(parent, (1,)), Cpuset(child, (1,))])
    assert writer.apply([Cpuset(child, (0,)), Cpuset(parent, (0,))]) == [True, True]
    assert reader.read_knobs(child).cpuset == reader.read_knobs(parent).cpuset == (0,)
    # set_cpuset(descendants=True) takes the whole subtree along, in the same safe order
    assert writer.set_cpuset(parent, [1], descendants=True)
    assert reader.read_knobs(child).cpuset == (1,)

    # CFS quota: a child may not exceed its parent (EINVAL), in either direction
    writer.apply([CpuQuota(parent, 50_000), CpuQuota(child, 50_000)])
    with pytest.raises(InvalidValue):
        writer.set_cpu_quota(parent, 20_000)
    assert writer.apply([CpuQuota(parent, 20_000), CpuQuota(child, 20_000)]) == [True, True]
    with pytest.raises(InvalidValue):
        writer.set_cpu_quota(child, 80_000)
    assert writer.apply([CpuQuota(child, 80_000), CpuQuota(parent, 80_000)]) == [True, True]
    assert reader.read_knobs(child).quota_us == reader.read_knobs(parent).quota_us == 80_000


def test_freeze_then_kill_all_on_v1(real_root: RealRoot) -> None:
    need_v1(real_root, "freezer", "cpuacct")
    rel = real_root.mkcg("besteffort/frozen")
    proc = real_root.spawn(rel, BUSY)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    assert writer.freeze(rel)
    assert wait(lambda: writer.freezer_state(rel) == "FROZEN")
    first, second = window(lambda: reader.sample(rel), 0.3)
    assert second.cpu_usage_ns - first.cpu_usage_ns < 20_000_000  # frozen: (almost) no CPU
    os.kill(proc.pid, signal.SIGKILL)  # the kernel fact kill_all works around:
    assert holds(lambda: proc.poll() is None, 0.3)  # a frozen v1 task does not act on SIGKILL while frozen
    assert writer.kill_all(rel) == 1
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert writer.freezer_state(rel) == "THAWED"
    assert wait(lambda: reader.pids(rel) == [])


def test_kill_all_signals_every_member(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/many")
    procs = [real_root.spawn(rel, SLEEP) for _ in range(3)]
    bystander = real_root.spawn(real_root.mkcg("besteffort/other"), SLEEP)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.kill_all(rel, signal.SIGTERM) == 3
    assert [p.wait(timeout=5) for p in procs] == [-signal.SIGTERM] * 3
    assert bystander.poll() is None  # only the cgroup's members


def test_move_pid_into_every_hierarchy(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/moved")
    proc = subprocess.Popen(SLEEP)
    real_root.procs.append(proc)  # teardown kills it even if the move fails
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.move_pid(rel, proc.pid)
    for d in real_root.dirs(rel):
        assert proc.pid in [int(x) for x in (d / "cgroup.procs").read_text().split()], d
    assert CgroupReader(real_root.hierarchy, real_root.name).pids(rel) == [proc.pid]
    proc.kill()
    proc.wait()
    with pytest.raises(CgroupError, match=f"no process {proc.pid}"):
        writer.move_pid(rel, proc.pid)
    with pytest.raises(InvalidValue):
        writer.move_pid(rel, 0)


def test_mkdir_and_rmdir_everywhere(real_root: RealRoot) -> None:
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    assert writer.mkdir("besteffort/a/b")
    assert writer.mkdir("besteffort/a/b") is False
    dirs = real_root.dirs("besteffort/a/b")
    assert all(d.is_dir() for d in dirs)
    if real_root.hierarchy.unified is not None:
        assert (real_root.path("unified", "besteffort/a/b") / "cpu.pressure").exists()
    if real_root.hierarchy.is_v1("cpuset"):  # copied from the parent so tasks can join
        cpus = (real_root.path("cpuset", "besteffort/a/b") / "cpuset.cpus").read_text().strip()
        assert cpus and cpus == (real_root.path("cpuset") / "cpuset.cpus").read_text().strip()
    proc = real_root.spawn("besteffort/a/b", SLEEP)
    with pytest.raises(CgroupBusy):
        writer.rmdir("besteffort/a/b")
    proc.kill()
    proc.wait()
    assert wait(lambda: not (real_root.path("cpu", "besteffort/a/b") / "cgroup.procs").read_text())
    assert writer.rmdir("besteffort", recursive=True)
    assert not any(d.exists() for d in real_root.dirs("besteffort"))


def test_vanished_cgroup_is_gone_and_a_recreated_one_is_read_again(real_root: RealRoot) -> None:
    rel = real_root.mkcg("besteffort/short")
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    reader.sample(rel)  # descriptors now kept open
    assert reader.walk("besteffort") == ["besteffort", rel]
    writer.rmdir(rel)
    with pytest.raises(CgroupGone):  # ENODEV on the kept descriptor, then ENOENT on reopen
        reader.sample(rel)
    with pytest.raises(CgroupGone):
        reader.children(rel)
    with pytest.raises(CgroupGone):
        writer.set_cpu_idle(rel, True)
    assert reader.walk("besteffort") == ["besteffort"]
    real_root.mkcg(rel)
    assert reader.sample(rel).cpu_usage_ns == 0  # the same name made again: a fresh cgroup


def test_a_reader_can_leave_out_the_memory_limit_and_memory_pressure(real_root: RealRoot) -> None:
    need_v1(real_root, "memory")
    rel = real_root.mkcg("besteffort/lean")
    assert CgroupWriter(real_root.hierarchy, real_root.name).set_memory_limit(rel, 48 << 20)
    real_root.spawn(rel, SLEEP)
    full = CgroupReader(real_root.hierarchy, real_root.name)
    lean = CgroupReader(real_root.hierarchy, real_root.name, memory_psi=False, memory_limit=False)
    names = {f.rsplit("/", 1)[1] for f in lean.files(rel)}
    assert set(names) == {f.rsplit("/", 1)[1] for f in full.files(rel)} - {
        "memory.limit_in_bytes", "memory.pressure"}
    a, b, c = full.sample(rel), lean.sample(rel), full.sample(rel)
    assert a.memory_limit_bytes == 48 << 20 and b.memory_limit_bytes is None and b.memory_psi_raw == b""
    # the same counters (the sleeper may still be starting up: they only grow between the full samples)
    assert a.cpu_usage_ns <= b.cpu_usage_ns <= c.cpu_usage_ns and a.nr_periods <= b.nr_periods <= c.nr_periods
    assert b.memory_working_set_bytes is not None
    if real_root.hierarchy.unified is not None:
        assert "cpu.pressure" in names and b.cpu_pressure is not None


def test_single_file_reads_agree_with_sample_and_see_a_cgroup_go_and_come_back(real_root: RealRoot) -> None:
    rel = real_root.mkcg("burstable/quiet")
    sleeper = real_root.spawn(rel, SLEEP)
    # past exec and into its sleep, the counter holds still; another reader: `reader` must not see rel
    probe = CgroupReader(real_root.hierarchy, real_root.name)
    settled(lambda: probe.sample(rel).cpu_usage_ns, 0.2)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    first = reader.cpu_usage(rel)  # a cgroup not read before: through `sample`
    s = reader.sample(rel)
    at, usage = reader.cpu_usage(rel)  # then from the kept usage descriptor alone
    assert first[1] == usage == s.cpu_usage_ns and at >= s.at  # a sleeper: its counter holds still
    raw = reader.cpu_psi_raw(rel)
    assert bool(raw) == bool(s.cpu_psi_raw) == (real_root.hierarchy.unified is not None)
    if raw:
        assert parse_psi(raw).some_total_us == parse_psi(s.cpu_psi_raw).some_total_us
    sleeper.kill()
    sleeper.wait()
    assert wait(lambda: not real_root.pids(rel))
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    writer.rmdir(rel)
    with pytest.raises(CgroupGone):  # the kept descriptor is dead, and no cgroup of that name is there
        reader.cpu_psi_raw(rel) if raw else reader.cpu_usage(rel)
    real_root.mkcg(rel)  # the same name made again: read afresh, not through dead descriptors
    assert reader.cpu_usage(rel)[1] == 0
    writer.rmdir(rel)
    real_root.mkcg(rel)
    assert reader.cpu_usage(rel)[1] == 0
    if raw:
        assert parse_psi(reader.cpu_psi_raw(rel)).some_total_us == 0


@pytest.mark.xdist_group("cpu")
def test_psi_from_the_real_cgroup2_mount(real_root: RealRoot) -> None:
    if real_root.hierarchy.unified is None:
        pytest.skip("no cgroup2 mount")
    rel = real_root.mkcg("burstable/crowded")
    if real_root.hierarchy.is_v1("cpuset"):
        CgroupWriter(real_root.hierarchy, real_root.name).set_cpuset(rel, [0])
    for _ in range(2):  # two busy loops on one cpu: each waits for the other
        real_root.spawn(rel, BUSY)
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    first, second = window(lambda: reader.sample(rel), 0.5)
    before, after = first.cpu_pressure, second.cpu_pressure
    assert before is not None and after is not None
    assert after.some_total_us - before.some_total_us > 50_000  # > 10 % of the window stalled
    assert second.memory_pressure is not None
    assert CgroupReader(real_root.hierarchy, real_root.name, psi=False).sample(rel).cpu_pressure is None


@pytest.mark.xdist_group("cpu")
def test_node_cpu_and_memory_from_proc(real_root: RealRoot) -> None:
    real_root.spawn(real_root.mkcg("burstable/busy"), BUSY)
    meter = NodeCpuMeter()
    first, node = window(meter.update, 0.5)
    assert first is None
    assert node is not None
    assert node.ncpu == os.cpu_count()
    assert 300 <= node.milli_cpu <= node.ncpu * 1000
    mem = read_meminfo()
    assert 0 < mem.used_bytes < mem.total_bytes


def test_node_cpu_arithmetic_from_an_injected_proc(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n"
    )
    meter = NodeCpuMeter(tmp_path)
    assert meter.update() is None
    # 300 busy ticks out of 400 on 2 cpus: 1.5 cores
    stat.write_text("cpu  250 0 250 900 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n")
    node = meter.update()
    assert node is not None and node.milli_cpu == pytest.approx(1500.0)
    assert node.utilisation == pytest.approx(0.75)


def test_v1_reads_agree_with_cgroupspy(real_root: RealRoot) -> None:
    """cgroupspy (v1 only, never in the agent's path) as an independent oracle for our v1 parsing."""
    need_v1(real_root, "cpu", "cpuacct", "memory")
    trees = pytest.importorskip("cgroupspy.trees")
    rel = real_root.mkcg("besteffort/oracle")
    proc = real_root.spawn(rel, [sys.executable, "-c", "import time\nx = b'x' * (8 << 20)\ntime.sleep(60)"])
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    assert wait(lambda: (reader.sample(rel).memory_usage_bytes or 0) >= 8 << 20)
    settled(lambda: reader.sample(rel).cpu_usage_ns, 0.2)  # in its sleep: the counters hold still
    tree = trees.Tree(groups=["cpu", "cpuacct", "memory"])
    node = {
        c: tree.get_node_by_path(f"/{c}/{real_root.name}/{rel}/".encode())
        for c in ("cpu", "cpuacct", "memory")
    }
    ours = reader.sample(rel)
    stat = node["memory"].controller.stat
    assert ours.cpu_usage_ns == node["cpuacct"].controller.usage
    assert ours.nr_periods == node["cpu"].controller.stat["nr_periods"]
    assert ours.memory_usage_bytes == node["memory"].controller.usage_in_bytes
    assert ours.memory_working_set_bytes == ours.memory_usage_bytes - stat["total_inactive_file"]
    assert proc.poll() is None
