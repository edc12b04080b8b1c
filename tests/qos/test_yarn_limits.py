"""YARN containers' limits from their allocation (qos/yarn_limits.py), from hand-built workloads."""

from __future__ import annotations

from kit.snapshot import MIB as MI
from kit.snapshot import yarn_container

from qos.model import Source, Workload
from qos.yarn_limits import YarnLimits, yarn_plan


def _c(seq: int, vcores: int, mb: int, *, terminating: bool = False,
       source: Source = Source.YARN) -> Workload:
    return yarn_container(1, seq, source=source, priority=5500, request_cpu=vcores * 1000,
                          request_mem=mb * MI, terminating=terminating, cpu=None, mem=None)


def test_memory_limit_is_the_allocation_and_root_shares_sum_the_vcores() -> None:
    plan = yarn_plan([_c(2, 2, 2048), _c(3, 1, 512)])
    assert plan.containers == (YarnLimits(_c(2, 0, 0).cgroup, 2048 * MI),
                               YarnLimits(_c(3, 0, 0).cgroup, 512 * MI))
    assert plan.root_shares == 3 * 1024


def test_cpu_quota_only_when_asked() -> None:
    (lim,) = yarn_plan([_c(2, 3, 100)], cpu_quota=True).containers
    assert lim.cfs_quota_us == 300_000


def test_dying_or_idle_containers_and_other_sources_are_left_out() -> None:
    plan = yarn_plan([_c(2, 2, 1024, terminating=True), _c(3, 0, 0), _c(4, 1, 64, source=Source.K8S)])
    assert plan.containers == () and plan.root_shares is None


def test_no_memory_no_limit_and_shares_are_clamped() -> None:
    plan = yarn_plan([_c(2, 300, 0)])
    assert plan.containers == () and plan.root_shares == 262_144
    assert yarn_plan([_c(2, 0, 64)]).root_shares == 2
