"""Builders for ledger tests: hand-made snapshots of BE workloads (the ledger's only input from the loop)."""

from __future__ import annotations

from collections.abc import Iterable

from kit.snapshot import node_snapshot

from agent.state import Event, EventType, LedgerView
from agent.state.records import Allocation, Application, NodeRecord
from qos.model import NodeSnapshot, Resources, Source, Tier, Workload

CAP = Resources(4000, 8 << 30)
APP_TS = "1700000000000"


def container(app: int, seq: int, attempt: int = 1) -> str:
    return f"container_e01_{APP_TS}_{app:04d}_{attempt:02d}_{seq:06d}"


def yarn_app(app: int) -> str:
    return f"application_{APP_TS}_{app:04d}"


def yarn(
    app: int, seq: int, cpu: int = 100, mem: int = 64 << 20, terminating: bool = False, priority: int = 5000
) -> Workload:
    cid = container(app, seq)
    return Workload(
        key=f"yarn/{cid}",
        name=cid,
        source=Source.YARN,
        tier=Tier.BESTEFFORT,
        be=True,
        priority=priority,
        cgroup=f"besteffort/hadoop-yarn/{cid}",
        requests=Resources(cpu, mem),
        app_id=yarn_app(app),
        container_seq=seq,
        terminating=terminating,
        started_at=1000.0,
    )


def k8s(uid: str, cpu: int = 200, mem: int = 128 << 20, app_id: str | None = None) -> Workload:
    return Workload(
        key=f"k8s/{uid}",
        name=f"pod-{uid[:8]}",
        source=Source.K8S,
        tier=Tier.BESTEFFORT,
        be=True,
        priority=3000,
        cgroup=f"besteffort/pod{uid}",
        requests=Resources(cpu, mem),
        app_id=app_id,
        namespace="batch",
    )


def hp(name: str) -> Workload:
    return Workload(
        key=f"local/{name}",
        name=name,
        source=Source.LOCAL,
        tier=Tier.GUARANTEED,
        be=False,
        priority=9000,
        cgroup=name,
        requests=Resources(1000, 1 << 30),
    )


def snapshot(
    workloads: Iterable[Workload], stale: dict[str, str] | None = None, capacity: Resources = CAP
) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=1000.0, capacity=capacity, cpus=(0, 1, 2, 3),
                         stale=stale or {})


class Replica:
    """What a watcher holds after applying events (the checker used against fresh snapshots)."""

    def __init__(self) -> None:
        self.revision = 0
        self.node: NodeRecord | None = None
        self.apps: dict[str, Application] = {}
        self.allocs: dict[str, Allocation] = {}

    def load(self, view: LedgerView) -> None:
        self.revision = view.revision
        self.node = view.node
        self.apps = {a.application_id: a for a in view.applications}
        self.allocs = {a.key: a for a in view.allocations}

    def apply(self, ev: Event) -> None:
        assert ev.revision == self.revision + 1, f"gap: {ev.revision} after {self.revision}"
        obj = ev.obj
        if isinstance(obj, NodeRecord):
            self.node = obj
        elif isinstance(obj, Application):
            if ev.type is EventType.DELETED:
                assert not any(a.application_id == obj.application_id for a in self.allocs.values()), (
                    f"application {obj.application_id} deleted while allocations still refer to it"
                )
                del self.apps[obj.application_id]
            else:
                self.apps[obj.application_id] = obj
        elif isinstance(obj, Allocation):
            if ev.type is EventType.DELETED:
                del self.allocs[obj.key]
            else:
                assert obj.application_id in self.apps, f"allocation {obj.key} before its application"
                self.allocs[obj.key] = obj
        self.revision = ev.revision

    def matches(self, view: LedgerView) -> bool:
        return (
            self.revision == view.revision
            and self.node == view.node
            and tuple(self.apps[k] for k in sorted(self.apps)) == view.applications
            and tuple(self.allocs[k] for k in sorted(self.allocs)) == view.allocations
        )
