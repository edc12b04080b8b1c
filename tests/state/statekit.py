"""Builders for ledger tests: hand-made snapshots of BE workloads (the ledger's only input from the loop).
Workloads are `kit.snapshot`'s, the replica a watcher keeps is `kit.api.Mirror`."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from kit.snapshot import node_snapshot, yarn_container

from qos.model import NodeSnapshot, Resources, Workload

CAP = Resources(4000, 8 << 30)

# YARN container `seq` of application `app` as the ledger tests place it: asking for 100 milli-CPU and 64 MiB
# unless `request_cpu` and `request_mem` say otherwise, started at 1000.0.
yarn = partial(yarn_container, request_cpu=100, request_mem=64 << 20, cpu=None, mem=None, started_at=1000.0)


def snapshot(
    workloads: Iterable[Workload], stale: dict[str, str] | None = None, capacity: Resources = CAP
) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=1000.0, capacity=capacity, cpus=(0, 1, 2, 3),
                         stale=stale or {})
