"""A hand-built `NodeSnapshot`, as policies and sources tests need one: a 16-core, 64 GiB node by default."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qos.model import NodeSnapshot, Resources, Usage, Workload

GIB = 1 << 30
NODE = Resources(16000, 64 * GIB)
NONE = Usage()
CPUS = tuple(range(16))


def node_snapshot(workloads: Iterable[Workload] = (), *, taken_at: float = 0.0, capacity: Resources = NODE,
                  cpus: tuple[int, ...] = CPUS, node: Usage = NONE, hp: Usage = NONE, be: Usage = NONE,
                  system: Usage = NONE, **more: Any) -> NodeSnapshot:
    """The snapshot of `workloads` on that node; any other `NodeSnapshot` field by its name in `more`."""
    return NodeSnapshot(taken_at=taken_at, capacity=capacity, cpus=cpus, node_usage=node, hp_usage=hp,
                        be_usage=be, system_usage=system, workloads=tuple(workloads), **more)
