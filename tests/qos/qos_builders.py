"""Hand-made snapshots and workloads for the policy tests: every figure is spelled out by the test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from kit.snapshot import node_snapshot

from qos.actions import Action, Evict, Hold, SetBeCpuIdle, SetBeCpuQuota, SetBeCpuset
from qos.model import BeTierState, NodeSnapshot, Resources, Source, Tier, Usage, Workload

GIB = 1 << 30
MIB = 1 << 20
T = TypeVar("T")


def workload(
    key: str,
    *,
    be: bool = True,
    priority: int = 5000,
    cpu: float | None = 0.0,
    mem: int | None = 0,
    request_cpu: int = 0,
    request_mem: int = 0,
    source: Source = Source.K8S,
    app_id: str | None = None,
    seq: int | None = None,
    started_at: float = 0.0,
    terminating: bool = False,
    age: float = 0.0,
) -> Workload:
    return Workload(
        key=key,
        name=key.rsplit("/", maxsplit=1)[-1],
        source=source,
        tier=Tier.BESTEFFORT if be else Tier.BURSTABLE,
        be=be,
        priority=priority,
        cgroup=f"{'besteffort' if be else 'burstable'}/{key.replace('/', '-')}",
        requests=Resources(request_cpu, request_mem),
        usage=Usage(milli_cpu=cpu, memory_working_set_bytes=mem),
        sample_age_s=age,
        started_at=started_at,
        app_id=app_id,
        container_seq=seq,
        terminating=terminating,
    )


def yarn(app: int, seq: int, **kw: object) -> Workload:
    """A YARN container of application `app`; seq 1 is its ApplicationMaster."""
    app_id = f"application_1700000000000_{app:04d}"
    cid = f"container_1700000000000_{app:04d}_01_{seq:06d}"
    return workload(f"yarn/{cid}", source=Source.YARN, app_id=app_id, seq=seq, **kw)  # type: ignore[arg-type]


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
