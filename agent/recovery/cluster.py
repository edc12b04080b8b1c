"""The scheduler's picture of the cluster, rebuilt from agents: one cache per node, one owner per key.

Apply rules (Kubernetes list+watch, adapted): a snapshot replaces a node's cache whole; an event applies
only at exactly the next revision of the same incarnation (a gap or a repeat is a protocol error and
forces a new snapshot); an allocation needs its application first; an allocation key is owned by one
node at a time, so nothing is ever counted twice.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from agent.state.records import (
    Allocation,
    Application,
    Event,
    EventType,
    Identity,
    LedgerView,
    NodeRecord,
    Notice,
)
from qos.model import Resources


class NodeState(enum.Enum):
    RECOVERING = "recovering"
    RECOVERED = "recovered"
    LOST = "lost"


class ProtocolError(Exception):
    """An agent's stream broke a rule (gap, unknown application); the node is re-snapshotted."""


@dataclass
class NodeCache:
    address: str
    state: NodeState = NodeState.RECOVERING
    identity: Identity | None = None
    revision: int = 0
    node: NodeRecord | None = None
    applications: dict[str, Application] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    notices: deque[Notice] = field(default_factory=lambda: deque(maxlen=20))
    unhealthy_since: float | None = None  # not (yet) recovered, or its stream is down
    recovered_at: float | None = None
    lost_at: float | None = None
    snapshots: int = 0
    recoveries: int = 0
    events_applied: int = 0
    last_error: str = ""
    resync: bool = True  # the cache must be reloaded from a snapshot before watching

    @property
    def node_id(self) -> str:
        return self.identity.node_id if self.identity else ""

    @property
    def incarnation(self) -> str:
        return self.identity.incarnation if self.identity else ""


class Cluster:
    def __init__(self, addresses: list[str]) -> None:
        self.nodes: dict[str, NodeCache] = {a: NodeCache(a) for a in addresses}
        self.owner: dict[str, str] = {}  # allocation key -> address of the node that holds it
        self.conflicts: list[str] = []

    # ---- applying agent state -------------------------------------------------------------------------

    def load_snapshot(self, address: str, view: LedgerView) -> None:
        """Replace the node's cache with `view`: node first, then applications, then allocations."""
        nc = self.nodes[address]
        self._drop_allocations(nc)
        nc.identity = view.identity
        nc.revision = view.revision
        nc.node = view.node
        nc.applications = {a.application_id: a for a in view.applications}
        nc.snapshots += 1
        for a in view.allocations:
            self._put_allocation(nc, a)

    def apply(self, address: str, ev: Event) -> None:
        nc = self.nodes[address]
        if ev.revision != nc.revision + 1:
            raise ProtocolError(f"{address}: event at revision {ev.revision} after {nc.revision} "
                                "(gap or repeat)")
        obj = ev.obj
        if isinstance(obj, NodeRecord):
            nc.node = obj
        elif isinstance(obj, Application):
            if ev.type is EventType.DELETED:
                nc.applications.pop(obj.application_id, None)
            else:
                nc.applications[obj.application_id] = obj
        elif isinstance(obj, Allocation):
            if ev.type is EventType.DELETED:
                if nc.allocations.pop(obj.key, None) is not None and self.owner.get(obj.key) == address:
                    del self.owner[obj.key]
            else:
                self._put_allocation(nc, obj)
        elif isinstance(obj, Notice):
            nc.notices.append(obj)
        nc.revision = ev.revision
        nc.events_applied += 1

    def advance(self, address: str, revision: int) -> None:
        """A bookmark or the end of the initial list: every event up to `revision` has been applied."""
        nc = self.nodes[address]
        if revision < nc.revision:
            raise ProtocolError(f"{address}: bookmark at {revision} behind applied revision {nc.revision}")
        nc.revision = revision

    def _put_allocation(self, nc: NodeCache, a: Allocation) -> None:
        if a.application_id not in nc.applications:
            raise ProtocolError(f"{nc.address}: allocation {a.key} refers to unknown application "
                                f"{a.application_id}")
        holder = self.owner.get(a.key)
        if holder is not None and holder != nc.address:
            self.conflicts.append(f"{a.key} reported by {nc.address} while held by {holder}; "
                                  f"kept on {holder}")
            return
        self.owner[a.key] = nc.address
        nc.allocations[a.key] = a

    def _drop_allocations(self, nc: NodeCache) -> None:
        for key in nc.allocations:
            if self.owner.get(key) == nc.address:
                del self.owner[key]
        nc.allocations = {}

    # ---- reading --------------------------------------------------------------------------------------

    def by_state(self, state: NodeState) -> list[NodeCache]:
        return [n for n in self.nodes.values() if n.state is state]

    def counted(self) -> list[tuple[NodeCache, Allocation]]:
        """Allocations of recovered nodes, each key once."""
        out = []
        for nc in self.nodes.values():
            if nc.state is NodeState.RECOVERED:
                out += [(nc, a) for k, a in nc.allocations.items() if self.owner.get(k) == nc.address]
        return out

    def totals(self) -> dict[str, int]:
        counted = self.counted()
        used = Resources()
        for _, a in counted:
            used = used + a.resources
        return {
            "nodes": len(self.nodes),
            "recovered": len(self.by_state(NodeState.RECOVERED)),
            "lost": len(self.by_state(NodeState.LOST)),
            "recovering": len(self.by_state(NodeState.RECOVERING)),
            "applications": len({a.application_id for _, a in counted}),
            "allocations": len(counted),
            "allocated_milli_cpu": used.milli_cpu,
            "allocated_memory_bytes": used.memory_bytes,
            "conflicts": len(self.conflicts),
        }
