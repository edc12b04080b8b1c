"""Small builders for the drain tests: workloads, snapshots and throwaway ledgers."""

from __future__ import annotations

import dataclasses

from kit.snapshot import node_snapshot, workload

from agent.decommission.controller import DrainController
from qos.actions import Action
from qos.admission import BatchBudget
from qos.drain import DrainPolicy, drain_decision
from qos.model import NodeSnapshot, Resources, Source, Workload
from qos.registry import BeCpuGrant, NodeOutputs

CAPACITY = Resources(4000, 8 << 30)


def be(name: str, *, priority: int = 3000, started_at: float = 0.0, mem: int = 0, cpu: int = 100,
       source: Source = Source.LOCAL, app: str | None = None, terminating: bool = False) -> Workload:
    """BE workload `name` of `source` in `besteffort/<name>`, asking for `cpu` and using `mem`."""
    return workload(f"{source.value}/besteffort/{name}", name=name, source=source, priority=priority,
                    cgroup=f"besteffort/{name}", request_cpu=cpu, cpu=None, mem=mem, started_at=started_at,
                    app_id=app, terminating=terminating)


def snapshot(*workloads: Workload, at: float = 1000.0, stale: dict[str, str] | None = None) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=at, capacity=CAPACITY, cpus=(0, 1), stale=stale or {})


def with_drain(ctl: DrainController, snap: NodeSnapshot) -> NodeSnapshot:
    """The snapshot as the agent builds it each tick: with the ledger's drain view."""
    return dataclasses.replace(snap, drain=ctl.view(snap))


def plan(snap: NodeSnapshot) -> list[Action]:
    """What the drain policy contributes to a tick from this snapshot."""
    return DrainPolicy().decide(snap, None)[0]


def decided(snap: NodeSnapshot, batch: Resources | None = None) -> NodeOutputs:
    """What the tick's decision hands the hooks: the drain decided (once) from this snapshot."""
    return NodeOutputs(BeCpuGrant(None, None, ""), BatchBudget(batch), drain_decision(snap))
