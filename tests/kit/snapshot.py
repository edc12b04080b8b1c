"""A hand-built `NodeSnapshot` and the workloads in it, as policy, source, ledger and API tests need them: a
16-core, 64 GiB node by default. `workload` builds any workload by its key; `yarn_container` a YARN container
by application and sequence number; `k8s_workload` and `yarn_workload` are the batch pod and YARN container of
the k8s batch and koord origin tests; `published` what the loop publishes after a tick of a snapshot."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from agent.published import Published
from qos.actions import Evict
from qos.model import NodeSnapshot, Resources, Source, Tier, Usage, Workload

GIB = 1 << 30
MIB = 1 << 20
TS = 1700000000000  # the YARN cluster timestamp in container and application ids
NODE = Resources(16000, 64 * GIB)
NONE = Usage()
CPUS = tuple(range(16))


def node_snapshot(workloads: Iterable[Workload] = (), *, taken_at: float = 0.0, capacity: Resources = NODE,
                  cpus: tuple[int, ...] = CPUS, node: Usage = NONE, hp: Usage = NONE, be: Usage = NONE,
                  system: Usage = NONE, **more: Any) -> NodeSnapshot:
    """The snapshot of `workloads` on that node; any other `NodeSnapshot` field by its name in `more`."""
    return NodeSnapshot(taken_at=taken_at, capacity=capacity, cpus=cpus, node_usage=node, hp_usage=hp,
                        be_usage=be, system_usage=system, workloads=tuple(workloads), **more)


def cpu_snapshot(cpus: tuple[int, ...], *workloads: Workload, **more: Any) -> NodeSnapshot:
    """The snapshot of `workloads` taken now on a node of exactly `cpus` (1000 millicores each) and 1 GiB: the
    real-cgroup cpuset tests' node, whose CPUs are their test root's."""
    capacity = Resources(1000 * len(cpus), GIB)
    return node_snapshot(workloads, taken_at=time.time(), capacity=capacity, cpus=cpus, **more)


def published(snapshot: NodeSnapshot | None = None, **fields: Any) -> Published:
    """What the loop publishes after a tick of `snapshot`: tick 1, started now, took no time, a 1 s interval,
    no BE CPU granted, the cpuset policy; any other `Published` field (or one of these) by its name in
    `fields`."""
    return Published(**{
        "tick": 1, "tick_started_at": time.time(), "tick_monotonic": time.monotonic(), "tick_duration_s": 0.0,
        "collect_duration_s": 0.0, "interval_s": 1.0, "snapshot": snapshot, "be_cpu_granted_milli": None,
        "be_cpu_policy": "cpuset", **fields})


def evicted_keys(actions: Iterable[object]) -> list[str]:
    """The keys of the workloads `actions` evict, in their order."""
    return [a.key for a in actions if isinstance(a, Evict)]


def application_id(app: int) -> str:
    """YARN application `app`'s id."""
    return f"application_{TS}_{app:04d}"


def container_id(app: int, seq: int, *, attempt: int = 1, epoch: int | None = 1) -> str:
    """YARN container `seq` of application `app`'s attempt `attempt`; `epoch` None: the id without the RM
    epoch (`container_<ts>_…`, as before Hadoop 2.6)."""
    era = "" if epoch is None else f"e{epoch:02d}_"
    return f"container_{era}{TS}_{app:04d}_{attempt:02d}_{seq:06d}"


def workload(key: str, *, be: bool | None = None, protected: bool = False, priority: int = 5000,
             cpu: float | None = 0.0, mem: int | None = 0, request_cpu: int = 0, request_mem: int = 0,
             source: Source | None = None, tier: Tier | None = None, name: str | None = None,
             cgroup: str | None = None, app_id: str | None = None, seq: int | None = None,
             started_at: float = 0.0, terminating: bool = False, age: float = 0.0, **more: Any) -> Workload:
    """The workload `key` (`k8s/…`, `yarn/…` or `local/<cgroup>`: its source unless `source` says otherwise),
    measured at `cpu` milli-CPU and `mem` bytes (None: not measured), asking for `request_cpu` and
    `request_mem`. BestEffort unless `be` is False (Burstable) or `tier` says otherwise; a `protected` one is
    not BE unless `be` says so. Named by the key's last part and in `<tier>/<key with - for />` (a local one:
    the cgroup its key names) unless `name` or `cgroup` say otherwise. `seq` is a YARN container's sequence
    number, `age` how old its usage figures are; any other `Workload` field by its name in `more`."""
    be = not protected if be is None else be
    source = source or Source(key.split("/", 1)[0])
    if cgroup is None and source is Source.LOCAL and "/" in key:
        cgroup = key.split("/", 1)[1]
    elif cgroup is None:
        cgroup = f"{'besteffort' if be else 'burstable'}/{key.replace('/', '-')}"
    return Workload(
        key=key,
        name=key.rsplit("/", maxsplit=1)[-1] if name is None else name,
        source=source,
        tier=tier or (Tier.BESTEFFORT if be else Tier.BURSTABLE),
        be=be,
        priority=priority,
        cgroup=cgroup,
        requests=Resources(request_cpu, request_mem),
        usage=Usage(milli_cpu=cpu, memory_working_set_bytes=mem),
        sample_age_s=age,
        started_at=started_at,
        app_id=app_id,
        container_seq=seq,
        terminating=terminating,
        protected=protected,
        **more,
    )


def yarn_container(app: int, seq: int, *, epoch: int | None = 1, cgroup: str | None = None,
                   **kw: Any) -> Workload:
    """YARN container `seq` of application `app` (seq 1 is its ApplicationMaster), in the NodeManager's
    cgroup unless `cgroup` says otherwise; the rest as `workload` takes it."""
    cid = container_id(app, seq, epoch=epoch)
    return workload(f"yarn/{cid}", app_id=application_id(app), seq=seq,
                    cgroup=f"besteffort/hadoop-yarn/{cid}" if cgroup is None else cgroup, **kw)


def k8s_workload(name: str, prio: int, cores: float, started: float, be: bool = True, **kw: Any) -> Workload:
    """A pod `name` asking for `cores` and 1 GiB: BestEffort (batch) unless `be` is False (Burstable)."""
    return workload(f"k8s/{name}", be=be, priority=prio, cpu=None, mem=None, request_cpu=int(cores * 1000),
                    request_mem=GIB, cgroup=f"besteffort/pod{name}", started_at=started, **kw)


def yarn_workload(seq: int, cores: int, started: float, app: int = 1, prio: int = 5000,
                  **kw: Any) -> Workload:
    """YARN container `seq` of application `app`, asking for `cores` and 1 GiB, in the NodeManager's
    cgroup."""
    return yarn_container(app, seq, epoch=17, priority=prio, cpu=None, mem=None, request_cpu=cores * 1000,
                          request_mem=GIB, started_at=started, **kw)


def hp_workload(name: str, **kw: Any) -> Workload:
    """A Guaranteed local workload in cgroup `name` (the node's own service: never batch); the rest as
    `workload` takes it."""
    return workload(f"local/{name}", be=False, tier=Tier.GUARANTEED, priority=9000, cgroup=name, cpu=None,
                    mem=None, **kw)
