"""A hand-built `NodeSnapshot` and the batch workloads in it, as policy and source tests need them: a 16-core,
64 GiB node by default."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qos.model import NodeSnapshot, Resources, Source, Tier, Usage, Workload

GIB = 1 << 30
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


def k8s_workload(name: str, prio: int, cores: float, started: float, be: bool = True, **kw: Any) -> Workload:
    """A pod `name` asking for `cores` and 1 GiB: BestEffort (batch) unless `be` is False (Burstable)."""
    return Workload(f"k8s/{name}", name, Source.K8S, Tier.BESTEFFORT if be else Tier.BURSTABLE, be, prio,
                    f"besteffort/pod{name}", Resources(int(cores * 1000), GIB), started_at=started, **kw)


def yarn_workload(seq: int, cores: int, started: float, app: int = 1, prio: int = 5000,
                  **kw: Any) -> Workload:
    """YARN container `seq` of application `app`, asking for `cores` and 1 GiB, in the NodeManager's
    cgroup."""
    cid = f"container_e17_{TS}_{app:04d}_01_{seq:06d}"
    return Workload(f"yarn/{cid}", cid, Source.YARN, Tier.BESTEFFORT, True, prio,
                    f"besteffort/hadoop-yarn/{cid}", Resources(cores * 1000, GIB), started_at=started,
                    app_id=f"application_{TS}_{app:04d}", container_seq=seq, **kw)
