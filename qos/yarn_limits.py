"""YARN containers held to their allocation: each live container's memory limit (and, if configured, a CFS
quota) from the NodeManager's `totalMemoryNeededMB` / `totalVCoresNeeded`, and `hadoop-yarn`'s weight from the
vcores allocated on the node (docs/batch-resources.md).

yarn-copilot-agent (only with `--sync-memory-cgroup`, v1 only) gives each container a memory cgroup with
`memory.limit_in_bytes` = totalMemoryNeededMB MiB and sets the `hadoop-yarn` cgroup's `cpu.shares` = Σ vcores
× 1024. Here the same on v1 and v2. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qos.batch_limits import SHARES_MAX, SHARES_MIN
from qos.model import Source, Workload

CFS_PERIOD_US = 100_000
VCORE_SHARES = 1024


@dataclass(frozen=True, slots=True)
class YarnLimits:
    """One container cgroup: memory limit in bytes, CFS quota per 100 ms (None: none)."""

    rel: str
    memory_limit_bytes: int
    cfs_quota_us: int | None = None


@dataclass(frozen=True, slots=True)
class YarnPlan:
    """The containers' limits and the `hadoop-yarn` cgroup's shares (None: no live container, left alone)."""

    containers: tuple[YarnLimits, ...]
    root_shares: int | None


def yarn_plan(workloads: Iterable[Workload], *, cpu_quota: bool = False) -> YarnPlan:
    """Live YARN containers (holding resources, not terminating) → their limits. A container whose
    allocation has no memory gets no limit (never a limit of 0)."""
    containers: list[YarnLimits] = []
    vcores = 0
    for w in workloads:
        held = w.requests.milli_cpu > 0 or w.requests.memory_bytes > 0
        if w.source is not Source.YARN or w.terminating or not held:
            continue
        vcores += w.requests.milli_cpu // 1000
        if w.requests.memory_bytes <= 0:
            continue
        quota = (max(1000, w.requests.milli_cpu * CFS_PERIOD_US // 1000)
                 if cpu_quota and w.requests.milli_cpu > 0 else None)
        containers.append(YarnLimits(w.cgroup, w.requests.memory_bytes, quota))
    shares = max(SHARES_MIN, min(SHARES_MAX, vcores * VCORE_SHARES)) if containers or vcores else None
    return YarnPlan(tuple(sorted(containers, key=lambda c: c.rel)), shares)
