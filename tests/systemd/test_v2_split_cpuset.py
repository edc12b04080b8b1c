"""The BE cpuset on pure cgroup v2 with a protected pod below the tier (the test guest): only what the kernel
needs is written, and every child the executor cut gets its CPUs back when the split ends.

On v2 a child's effective CPUs are bounded by its parent's, so the tier's own cpuset is the whole cut at
tier level, and the cgroups below keep what they had (no write). While a protected pod is below the tier the
BE children are cut one by one; when the protected pod goes, the tier takes the cut again and the children
cut meanwhile are given every CPU back — otherwise they would stay confined after BE's budget grows.
Real v2 cgroups under a private root (tests/kit/realcg.py), real processes, the agent's executor and writer.
"""

from __future__ import annotations

import time

import pytest
from kit.realcg import RealRoot
from kit.snapshot import cpu_snapshot, workload

from agent.executors.apply import ActionExecutor
from cgroups.parsers import parse_cpuset
from cgroups.writer import CgroupWriter
from qos.actions import SetBeCpuset

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

TIER, KP, POD_A, POD_B = "besteffort", "besteffort/podkp", "besteffort/poda", "besteffort/podb"


def test_v2_cuts_only_the_tier_or_the_members_and_gives_cut_children_their_cpus_back(
        real_root: RealRoot) -> None:
    if real_root.hierarchy.mode != "v2":
        pytest.skip("pure cgroup v2 only (the guest)")

    def cpus(rel: str, name: str = "cpuset.cpus") -> set[int]:
        return set(parse_cpuset((real_root.path("unified", rel) / name).read_text().strip().encode()))

    for rel in (KP, POD_A, POD_B):
        real_root.mkcg(rel)
        real_root.spawn(rel, ["sleep", "60"])
    every = tuple(sorted(cpus("", "cpuset.cpus.effective")))
    if len(every) < 2:
        pytest.skip("needs 2 CPUs")
    cut = every[-1:]
    ex = ActionExecutor(CgroupWriter(real_root.hierarchy, real_root.name), TIER, {}, dry_run=False,
                        rate_per_s=1.0, burst=1, recheck_cooldown_s=1.0, audit=lambda _r: None,
                        now=time.monotonic(), tier_owned=False)
    be = (workload("k8s/a", cgroup=POD_A), workload("k8s/b", cgroup=POD_B))

    ex.execute([SetBeCpuset(cut, "t")], cpu_snapshot(every, *be))
    assert cpus(TIER) == set(cut)
    assert all(cpus(p) == set() for p in (KP, POD_A, POD_B)), "v2: nothing below the tier is written"
    assert cpus(POD_A, "cpuset.cpus.effective") == set(cut)

    ex.execute([], cpu_snapshot(every, workload("k8s/kp", cgroup=KP, protected=True), *be))
    assert cpus(TIER) == set(every) and cpus(KP) == set(), "the protected pod's cgroup is never written"
    assert cpus(KP, "cpuset.cpus.effective") == set(every)
    assert cpus(POD_A) == set(cut) and cpus(POD_B) == set(cut)

    ex.execute([], cpu_snapshot(every, *be))  # the protected pod is gone: tier level again
    assert cpus(TIER) == set(cut)
    ex.execute([SetBeCpuset(every, "grow")], cpu_snapshot(every, *be))
    assert cpus(TIER) == set(every)
    for pod in (POD_A, POD_B):
        assert cpus(pod, "cpuset.cpus.effective") == set(every), f"{pod} stayed confined after the split"
