"""The scheduler's picture of the cluster, rebuilt from agents: one cache per node, one owner per key.

Apply rules (Kubernetes list+watch, adapted): a snapshot replaces a node's cache whole; an event applies
only at exactly the next revision of the same incarnation (a gap or a repeat is a protocol error and
forces a new snapshot); an allocation needs its application first; an allocation key is owned by one
node at a time, so nothing is ever counted twice.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery.allocations import Allocations, Usage, columns
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


class NodeState(enum.Enum):
    RECOVERING = "recovering"
    RECOVERED = "recovered"
    LOST = "lost"


class ProtocolError(Exception):
    """An agent's stream broke a rule (gap, unknown application); the node is re-snapshotted."""


@dataclass
class NodeCache:
    address: str
    identity: Identity | None = None
    revision: int = 0
    node: NodeRecord | None = None
    applications: dict[str, Application] = field(default_factory=dict)
    allocations: Allocations = field(default_factory=Allocations)  # changed through Cluster (totals)
    notices: deque[Notice] = field(default_factory=lambda: deque(maxlen=20))
    unhealthy_since: float | None = None  # not (yet) recovered, or its stream is down
    recovered_at: float | None = None
    lost_at: float | None = None
    snapshots: int = 0
    recoveries: int = 0
    events_applied: int = 0
    last_error: str = ""
    resync: bool = True  # the cache must be reloaded from a snapshot before watching
    _state: NodeState = field(default=NodeState.RECOVERING, repr=False)
    _tally: _Tally | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> NodeState:
        return self._state

    @state.setter
    def state(self, new: NodeState) -> None:
        old, self._state = self._state, new
        if self._tally is not None and old is not new:
            self._tally.moved(self, old, new)

    @property
    def node_id(self) -> str:
        return self.identity.node_id if self.identity else ""

    @property
    def incarnation(self) -> str:
        return self.identity.incarnation if self.identity else ""


class _Tally:
    """The cluster's totals kept as nodes change state and recovered nodes change allocations, so reading
    them costs nothing per allocation (progress is reported once per node)."""

    def __init__(self, nodes: int) -> None:
        self.states = dict.fromkeys(NodeState, 0)
        self.states[NodeState.RECOVERING] = nodes
        self.allocations = 0
        self.milli_cpu = 0
        self.memory_bytes = 0
        self.applications: dict[str, int] = {}  # application id -> counted allocations of it

    def moved(self, nc: NodeCache, old: NodeState, new: NodeState) -> None:
        self.states[old] -= 1
        self.states[new] += 1
        if old is NodeState.RECOVERED:
            self.count_node(nc.allocations, -1)
        elif new is NodeState.RECOVERED:
            self.count_node(nc.allocations, 1)

    def count_node(self, held: Allocations, sign: int) -> None:
        """A node's allocations in (1) or out (-1), from the sums it keeps."""
        self._count(len(held), held.milli_cpu, held.memory_bytes, held.applications.items(), sign)

    def count(self, a: Usage, sign: int) -> None:
        self._count(1, a.resources.milli_cpu, a.resources.memory_bytes, ((a.application_id, 1),), sign)

    def _count(self, n: int, cpu: int, mem: int, applications: Iterable[tuple[str, int]], sign: int) -> None:
        apps = self.applications
        for app, k in applications:
            left = apps.get(app, 0) + sign * k
            if left:
                apps[app] = left
            else:
                del apps[app]
        self.allocations += sign * n
        self.milli_cpu += sign * cpu
        self.memory_bytes += sign * mem


class Cluster:
    def __init__(self, addresses: list[str]) -> None:
        self._tally = _Tally(len(set(addresses)))
        self.nodes: dict[str, NodeCache] = {a: NodeCache(a, _tally=self._tally) for a in addresses}
        self.owner: dict[str, str] = {}  # allocation key -> address of the node that holds it
        self.conflicts: list[str] = []

    # ---- applying agent state -------------------------------------------------------------------------

    def load_snapshot(self, address: str, view: LedgerView | pb.Snapshot) -> None:
        """Replace the node's cache with `view`: node first, then applications, then allocations. From the
        snapshot message itself, its allocations are checked and counted now and made records when first
        read (agent.recovery.allocations)."""
        if isinstance(view, LedgerView):
            self._load(address, view.identity, view.revision, view.node, view.applications, view.allocations)
        else:
            self._load(address, convert.identity_from(view.identity), view.revision,
                       convert.node_from(view.node), [convert.application_from(a) for a in view.applications],
                       view.allocations)

    def _load(self, address: str, identity: Identity, revision: int, node: NodeRecord,
              applications: Iterable[Application], allocations: Sequence[Allocation | pb.Allocation],
              ) -> None:
        nc = self.nodes[address]
        counted = nc.state is NodeState.RECOVERED
        if counted:
            self._tally.count_node(nc.allocations, -1)
        self._drop_allocations(nc)
        nc.identity = identity
        nc.revision = revision
        nc.node = node
        nc.applications = apps = {a.application_id: a for a in applications}
        nc.snapshots += 1
        try:
            self._hold_all(nc, apps, allocations)
        finally:
            if counted:
                self._tally.count_node(nc.allocations, 1)

    def _hold_all(self, nc: NodeCache, apps: dict[str, Application],
                  allocations: Sequence[Allocation | pb.Allocation]) -> None:
        """`_put_allocation` for a whole snapshot. This runs for every allocation of the cluster at recovery,
        so the usual case (no key held by another node) is a few loops in C rather than one in Python, and
        looks each key up in the cluster's owners once (a cache miss each, a million keys at 10,000 nodes)."""
        me = nc.address
        cols = columns(list(allocations))
        if not apps.keys() >= set(cols.application_ids):
            app, key = next((a, k) for a, k in zip(cols.application_ids, cols.keys, strict=True)
                            if a not in apps)
            raise ProtocolError(f"{me}: allocation {key} refers to unknown application {app}")
        index = dict(zip(cols.keys, range(len(cols.keys)), strict=True))  # a repeated key: the last one
        before = len(self.owner)
        self.owner.update(zip(index, repeat(me)))
        if len(self.owner) - before != len(index):
            self._give_back(nc, index)
        nc.allocations.load(allocations, cols, index)

    def _give_back(self, nc: NodeCache, index: dict[str, int]) -> None:
        """Some keys of `index` were held by other nodes when `nc` claimed them all: each goes back to its
        holder (the node whose cache has it) and out of `index`, as a conflict. A pass over every node, which
        only a key reported by two nodes costs."""
        held = {}
        for other in self.nodes.values():
            if other is not nc:
                held.update(dict.fromkeys(other.allocations.common(index.keys()), other.address))
        for key in [k for k in index if k in held]:
            self.owner[key] = held[key]
            self._conflict(key, nc.address, held[key])
            del index[key]

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
                gone = nc.allocations.usage_of(obj.key)
                if gone is not None:
                    del nc.allocations[obj.key]
                    if self.owner.get(obj.key) == address:
                        del self.owner[obj.key]
                    if nc.state is NodeState.RECOVERED:
                        self._tally.count(gone, -1)
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
            self._conflict(a.key, nc.address, holder)
            return
        self.owner[a.key] = nc.address
        was = nc.allocations.usage_of(a.key)
        nc.allocations[a.key] = a
        if nc.state is NodeState.RECOVERED:
            if was is not None:
                self._tally.count(was, -1)
            self._tally.count(a, 1)

    def _conflict(self, key: str, address: str, holder: str) -> None:
        self.conflicts.append(f"{key} reported by {address} while held by {holder}; kept on {holder}")

    def _drop_allocations(self, nc: NodeCache) -> None:
        owner, me = self.owner, nc.address
        for key in nc.allocations:
            if owner.get(key) == me:
                del owner[key]
        nc.allocations.clear()

    # ---- reading --------------------------------------------------------------------------------------

    def by_state(self, state: NodeState) -> list[NodeCache]:
        return [n for n in self.nodes.values() if n.state is state]

    def count(self, state: NodeState) -> int:
        """How many nodes are in `state` (without listing them)."""
        return self._tally.states[state]

    def counted(self) -> list[tuple[NodeCache, Allocation]]:
        """Allocations of recovered nodes, each key once."""
        out = []
        for nc in self.nodes.values():
            if nc.state is NodeState.RECOVERED:
                out += [(nc, a) for k, a in nc.allocations.items() if self.owner.get(k) == nc.address]
        return out

    def totals(self) -> dict[str, int]:
        t = self._tally
        return {
            "nodes": len(self.nodes),
            "recovered": t.states[NodeState.RECOVERED],
            "lost": t.states[NodeState.LOST],
            "recovering": t.states[NodeState.RECOVERING],
            "applications": len(t.applications),
            "allocations": t.allocations,
            "allocated_milli_cpu": t.milli_cpu,
            "allocated_memory_bytes": t.memory_bytes,
            "conflicts": len(self.conflicts),
        }
