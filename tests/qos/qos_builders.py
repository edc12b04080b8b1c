"""Hand-made snapshots for the policy tests (their workloads are `kit.snapshot.workload`): every figure is
spelled out by the test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from kit.snapshot import GIB, node_snapshot

from qos.actions import Action, Evict, Hold, SetBeCpuIdle, SetBeCpuQuota, SetBeCpuset
from qos.model import BeTierState, NodeSnapshot, Resources, Usage, Workload

T = TypeVar("T")


def snapshot(
    *,
    t: float = 1000.0,
    cpus: int | tuple[int, ...] = 4,
    capacity_cpu: int | None = None,
    capacity_mem: int = 8 * GIB,
    hp_cpu: float | None = 0.0,
    system_cpu: float | None = 0.0,
    be_cpu: float | None = 0.0,
    node_mem: int | None = 0,
    workloads: Iterable[Workload] = (),
    be_tier: BeTierState | None = None,
    psi: float | None = None,
    stale: Mapping[str, str] | None = None,
    interval: float = 1.0,
) -> NodeSnapshot:
    cpu_ids = tuple(range(cpus)) if isinstance(cpus, int) else cpus
    return node_snapshot(workloads, taken_at=t,
                         capacity=Resources(len(cpu_ids) * 1000 if capacity_cpu is None else capacity_cpu,
                                            capacity_mem),
                         cpus=cpu_ids,
                         node=Usage(milli_cpu=None, memory_working_set_bytes=node_mem),
                         hp=Usage(milli_cpu=hp_cpu), be=Usage(milli_cpu=be_cpu),
                         system=Usage(milli_cpu=system_cpu), be_tier=be_tier or BeTierState(),
                         hp_cpu_pressure_some_avg10=psi, stale=dict(stale or {}),
                         interval_s=interval)


def of_type(actions: Iterable[Action], kind: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, kind)]


def cpusets(actions: Iterable[Action]) -> list[tuple[int, ...]]:
    return [a.cpus for a in of_type(actions, SetBeCpuset)]


def quotas(actions: Iterable[Action]) -> list[int | None]:
    return [a.milli_cpu for a in of_type(actions, SetBeCpuQuota)]


def evicted(actions: Iterable[Action]) -> list[str]:
    return [a.key for a in of_type(actions, Evict)]


def holds(actions: Iterable[Action]) -> list[str]:
    return [a.reason for a in of_type(actions, Hold)]


def idles(actions: Iterable[Action]) -> list[bool]:
    return [a.idle for a in of_type(actions, SetBeCpuIdle)]
