"""A node's snapshot message as the recovery cache keeps it: `agent.api.convert`'s mapping, made for bulk.

Recovery keeps every allocation of the cluster (a million at 10,000 nodes), so the per-allocation work is one
constructor call with each field read once; values that repeat across allocations are shared (application
ids and namespaces interned, equal resources one object), which bounds the cache's memory. The records are
equal to `convert.allocation_from`'s (tests/api/test_api_recovery_decode.py holds them so).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.state.records import Allocation, LedgerView, Phase
from qos.model import Resources, Source

_SOURCE = convert.SOURCE_FROM_PB.get
_PHASE = convert.PHASE_FROM_PB.get
_LOCAL, _RUNNING = Source.LOCAL, Phase.RUNNING
_SHARED_RESOURCES = 4096  # distinct (milli-CPU, bytes) pairs kept as shared objects; the rest are not shared


class Decoder:
    """Converts snapshots for one cluster cache; holds the shared resource objects."""

    def __init__(self) -> None:
        self._resources: dict[tuple[int, int], Resources] = {}

    def view(self, m: pb.Snapshot) -> LedgerView:
        return LedgerView(
            identity=convert.identity_from(m.identity), revision=m.revision,
            oldest_watchable_revision=m.oldest_watchable_revision, node=convert.node_from(m.node),
            applications=tuple(convert.application_from(a) for a in m.applications),
            allocations=self.allocations(m.allocations), taken_at=convert.sec(m.taken_unix_ms),
        )

    def allocations(self, msgs: Iterable[pb.Allocation]) -> tuple[Allocation, ...]:
        return tuple(map(self.allocation, msgs))

    def allocation(self, m: pb.Allocation, key: str | None = None) -> Allocation:
        """`m` as a record; `key`, when given, is `m.key` already read (the record then shares it)."""
        r = m.resources
        rk = (r.milli_cpu, r.memory_bytes)
        res = self._resources.get(rk)
        if res is None:
            res = Resources(*rk)
            if len(self._resources) < _SHARED_RESOURCES:
                self._resources[rk] = res
        tags = m.tags
        return Allocation(
            m.key if key is None else key, sys.intern(m.application_id), _SOURCE(m.source, _LOCAL), res,
            _PHASE(m.phase, _RUNNING), m.priority, m.cgroup, m.name, sys.intern(m.namespace),
            m.created_unix_ms / 1000.0, m.started_unix_ms / 1000.0, m.scheduler_epoch, m.request_id,
            tuple([(t.key, t.value) for t in tags]) if tags else (), m.revision,
        )
