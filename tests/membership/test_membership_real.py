"""BE knobs on real cgroups with a protected pod below the BE tier: the protected pod keeps every CPU and
is never idle nor capped, the BE pods take the cut; without it the knobs go back onto the tier.

Real v1 controllers (cpu, cpuset) under a private root, real processes; the executor is the agent's own
with its real cgroup writer. The snapshots are hand-built (the kubelet cannot run here).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest
from kit.poll import wait, window
from kit.realcg import RealRoot, need_v1
from kit.snapshot import cpu_snapshot, workload

from agent.daemon.collector import Collector, TierPaths
from agent.executors.apply import ActionExecutor
from agent.published import ActionRecord
from cgroups.parsers import parse_cpuset
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import SetBeCpuIdle, SetBeCpuQuota, SetBeCpuset
from qos.model import Resources

pytestmark = pytest.mark.cgroups

TIER = "besteffort"
KP = "besteffort/podkp"
POD_A, POD_B = "besteffort/poda", "besteffort/podb"
YARN_DIR = "besteffort/hadoop-yarn"
YARN_C = f"{YARN_DIR}/container_1700000000000_0001_01_000002"
SLEEP = ["sleep", "60"]


def _write(real_root: RealRoot, ctrl: str, rel: str, name: str, value: str) -> None:
    (real_root.path(ctrl, rel) / name).write_text(value)


def _cpus(real_root: RealRoot, rel: str) -> set[int]:
    return set(parse_cpuset(real_root.read("cpuset", rel, "cpuset.cpus").encode()))


def _allowed(pid: int) -> set[int]:
    """The CPUs the kernel lets this process run on (what the cpuset really did to it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpuset(line.split(":", 1)[1].strip().encode()))
    raise AssertionError(f"no Cpus_allowed_list for pid {pid}")


def _runs_on(real_root: RealRoot, pid: int, rel: str, cpus: tuple[int, ...]) -> None:
    """The process may run on `cpus` only. Waited for (up to 2 s): once, in CI under load, a sleeper's mask
    read wider than its cgroup's cpuset right after the writes; the message says what the kernel showed."""
    if wait(lambda: _allowed(pid) == set(cpus), timeout=2.0, every=0.02):
        return
    procs = real_root.read("cpuset", rel, "cgroup.procs").split()
    effective = real_root.read("cpuset", rel, "cpuset.effective_cpus")
    raise AssertionError(
        f"pid {pid} in {rel} may run on {sorted(_allowed(pid))}, its cgroup has cpuset.cpus "
        f"{sorted(_cpus(real_root, rel))}, effective {effective}, procs {procs}, wanted {list(cpus)}")


def _idle(real_root: RealRoot, rel: str) -> str:
    return real_root.read("cpu", rel, "cpu.idle")


def _node(real_root: RealRoot) -> tuple[int, ...]:
    cpus = tuple(sorted(_cpus(real_root, "")))
    if len(cpus) < 2:
        pytest.skip(f"needs at least 2 CPUs in the test root's cpuset, has {cpus}")
    return cpus


def _executor(real_root: RealRoot, audit: list[ActionRecord], *, dry_run: bool = False) -> ActionExecutor:
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    return ActionExecutor(writer, TIER, {}, dry_run=dry_run, rate_per_s=1.0, burst=1, recheck_cooldown_s=1.0,
                          audit=audit.append, now=time.monotonic(), tier_owned=True)


def _tree(real_root: RealRoot) -> dict[str, int]:
    """A BE tier as the kubelet lays it out (shares 2 on the tier and the pods), one sleeper in each."""
    pids = {}
    for rel in (KP, POD_A, POD_B, YARN_C):
        real_root.mkcg(rel)
        pids[rel] = real_root.spawn(rel, SLEEP).pid
    for rel in (TIER, KP, POD_A, POD_B):
        _write(real_root, "cpu", rel, "cpu.shares", "2")
    return pids


WORKLOADS = (workload("k8s/a", cgroup=POD_A), workload("k8s/b", cgroup=POD_B),
             workload("yarn/c", cgroup=YARN_C))
PROTECTED = workload("k8s/kp", cgroup=KP, protected=True)


async def test_protected_pod_keeps_every_cpu_while_be_pods_are_cut_then_tier_level_again(
        real_root: RealRoot) -> None:
    need_v1(real_root, "cpu", "cpuset")
    cpus = _node(real_root)
    if not (real_root.path("cpu") / "cpu.idle").exists():
        pytest.skip("this kernel has no cpu.idle on v1")
    pids = _tree(real_root)
    cut = cpus[-1:]
    audit: list[ActionRecord] = []
    ex = _executor(real_root, audit)

    # 1. no protected pod known: tier-level knobs, the whole tier cut (kube-proxy's cgroup too, as today)
    ex.execute([SetBeCpuIdle(True, "t"), SetBeCpuset(cut, "t")], cpu_snapshot(cpus, *WORKLOADS))
    assert _cpus(real_root, TIER) == set(cut) and _cpus(real_root, KP) == set(cut)
    assert _idle(real_root, TIER) == "1" and _idle(real_root, POD_A) == "0"
    _runs_on(real_root, pids[POD_A], POD_A, cut)

    # 2. the snapshot says the pod is protected: within this tick it gets every CPU back, the tier
    #    leaves idle with its kubelet weight, each BE child subtree takes the cut and cpu.idle
    records = ex.execute([], cpu_snapshot(cpus, PROTECTED, *WORKLOADS))
    assert {r.kind for r in records} == {"set_be_cpuset", "set_be_cpu_idle"}
    assert all(r.outcome == "applied" and "protected pod spared" in r.reason for r in records)
    assert _cpus(real_root, TIER) == set(cpus) and _cpus(real_root, KP) == set(cpus)
    _runs_on(real_root, pids[KP], KP, cpus)
    assert _idle(real_root, TIER) == "0" and _idle(real_root, KP) == "0"
    assert real_root.read("cpu", TIER, "cpu.shares") == "2"
    for rel in (POD_A, POD_B, YARN_DIR):
        assert _cpus(real_root, rel) == set(cut), rel
        assert _idle(real_root, rel) == "1", rel
    assert _cpus(real_root, YARN_C) == set(cut)
    _runs_on(real_root, pids[POD_A], POD_A, cut)
    _runs_on(real_root, pids[YARN_C], YARN_C, cut)

    # 3. a policy action while split goes to the members only
    wider = cpus[-2:]
    records = ex.execute([SetBeCpuset(wider, "grow")], cpu_snapshot(cpus, PROTECTED, *WORKLOADS))
    assert [r.kind for r in records] == ["set_be_cpuset"]
    assert records[0].numbers["protected_children_spared"] == 1
    assert _cpus(real_root, POD_A) == set(wider) and _cpus(real_root, KP) == set(cpus)
    ex.execute([SetBeCpuset(cut, "shrink")], cpu_snapshot(cpus, PROTECTED, *WORKLOADS))

    # 4. a new BE pod appears (on disk before any source lists it): it gets the knobs within one tick
    real_root.mkcg("besteffort/podc")
    _write(real_root, "cpu", "besteffort/podc", "cpu.shares", "2")
    pid_c = real_root.spawn("besteffort/podc", SLEEP).pid
    ex.execute([], cpu_snapshot(cpus, PROTECTED, *WORKLOADS))
    assert _cpus(real_root, "besteffort/podc") == set(cut) and _idle(real_root, "besteffort/podc") == "1"
    _runs_on(real_root, pid_c, "besteffort/podc", cut)

    # 5. stale data that no longer lists the protected pod moves nothing: it stays spared
    stale = dataclasses.replace(cpu_snapshot(cpus, *WORKLOADS), stale={"kubelet": "unreachable"})
    assert ex.execute([], stale) == []
    assert _cpus(real_root, KP) == set(cpus) and _idle(real_root, TIER) == "0"

    # 6. the protected pod goes away: tier-level knobs again, children out of idle with their weights back
    for proc in list(real_root.procs):
        if proc.pid == pids[KP]:
            proc.kill()
            proc.wait()
    _wait_empty(real_root, KP)
    for d in real_root.dirs(KP):
        os.rmdir(d)
    records = ex.execute([], cpu_snapshot(cpus, *WORKLOADS))
    assert {r.kind for r in records} >= {"set_be_cpuset", "set_be_cpu_idle"}
    assert all("back on the BE tier" in r.reason for r in records)
    assert _cpus(real_root, TIER) == set(cut) and _idle(real_root, TIER) == "1"
    for rel in (POD_A, POD_B, YARN_DIR, "besteffort/podc"):
        assert _idle(real_root, rel) == "0", rel
        assert _cpus(real_root, rel) == set(cut), rel
    assert real_root.read("cpu", POD_A, "cpu.shares") == "2"  # the kubelet's weight, not 1024
    assert real_root.read("cpu", YARN_DIR, "cpu.shares") == "1024"  # what it had before going idle
    # nothing more to move: a quiet tick writes nothing
    writes = ex.cgroup_writes
    assert ex.execute([], cpu_snapshot(cpus, *WORKLOADS)) == []
    assert ex.cgroup_writes == writes


def _wait_empty(real_root: RealRoot, rel: str) -> None:
    deadline = time.monotonic() + 5
    while real_root.pids(rel) and time.monotonic() < deadline:
        time.sleep(0.02)


def _quota(real_root: RealRoot, rel: str) -> int:
    return int(real_root.read("cpu", rel, "cpu.cfs_quota_us"))


async def test_cfs_quota_is_split_across_the_be_children_and_the_protected_pod_is_never_capped(
        real_root: RealRoot) -> None:
    need_v1(real_root, "cpu")
    cpus = _node(real_root)
    _tree(real_root)
    yarn2 = workload("yarn/c2", cgroup=f"{YARN_DIR}/container_1700000000000_0001_01_000003")
    audit: list[ActionRecord] = []
    ex = _executor(real_root, audit)
    ex.execute([SetBeCpuQuota(400, "t")], cpu_snapshot(cpus, *WORKLOADS))
    assert _quota(real_root, TIER) == 40_000

    # split: the tier and kube-proxy uncapped, 40 ms per 100 ms shared by BE workload count (YARN has 2)
    snap = cpu_snapshot(cpus, PROTECTED, *WORKLOADS, yarn2)
    records = ex.execute([], snap)
    assert [r.kind for r in records] == ["set_be_cpu_quota"]
    assert _quota(real_root, TIER) == -1 and _quota(real_root, KP) == -1
    assert (_quota(real_root, YARN_DIR), _quota(real_root, POD_A), _quota(real_root, POD_B)) == (
        20_000, 10_000, 10_000)
    # a cut while split is split again; the floor is 2 ms per member
    ex.execute([SetBeCpuQuota(40, "cut")], snap)
    assert (_quota(real_root, YARN_DIR), _quota(real_root, POD_A), _quota(real_root, POD_B)) == (
        2_000, 2_000, 2_000)
    assert _quota(real_root, KP) == -1

    # protected pod gone from the snapshot: children lifted first, then the tier capped again
    ex.execute([], cpu_snapshot(cpus, *WORKLOADS, yarn2))
    assert _quota(real_root, TIER) == 4_000
    assert {_quota(real_root, r) for r in (KP, YARN_DIR, POD_A, POD_B)} == {-1}


@pytest.mark.xdist_group("cpu")
def test_protected_pod_usage_is_not_be_usage(real_root: RealRoot) -> None:
    need_v1(real_root, "cpu", "cpuacct")
    # The busy loop must get its share on a machine others keep busy (CI runs a QEMU guest beside this
    # phase): the test's root outweighs the root cgroup's tasks as a kubepods root does on a node, and the
    # window opens only once the loop runs (a fresh interpreter's start-up is not the loop).
    (real_root.path("cpu") / "cpu.shares").write_text("16384")
    real_root.mkcg(KP)
    real_root.mkcg(POD_A)
    real_root.spawn(KP, [sys.executable, "-c", "while True: pass"])
    real_root.spawn(POD_A, SLEEP)
    usage = real_root.path("cpuacct", KP) / "cpuacct.usage"
    assert wait(lambda: int(usage.read_text()) > 300_000_000, 30, every=0.05), "the busy loop never ran"
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    collector = Collector(reader, TierPaths(root="", besteffort=TIER), Resources(2000, 1 << 30), (0, 1),
                          "cgroup-root", 0.5)
    ws = [PROTECTED, workload("k8s/a", cgroup=POD_A)]
    try:
        _, snap = window(lambda: collector.collect(ws, frozenset(), {}), 0.6)
    finally:
        collector.close()
        reader.close()
    kp = snap.workload("k8s/kp")
    assert kp is not None and kp.usage.milli_cpu is not None
    assert kp.usage.milli_cpu > 200, f"the busy loop should get a good part of a core, got {kp.usage}"
    be, hp = snap.be_usage.milli_cpu, snap.hp_usage.milli_cpu
    assert be is not None and hp is not None
    assert be < 0.25 * kp.usage.milli_cpu, f"BE usage {be:.0f} still counts the protected pod"
    assert hp > 0.6 * kp.usage.milli_cpu, f"HP usage {hp:.0f} misses the protected pod"
