"""A node's snapshot message as the recovery cache keeps it: `agent.api.convert`'s mapping, made for bulk.

Recovery decodes every allocation of the cluster at once (a million at 10,000 nodes), so the per-allocation
work is one constructor call with each field read once; values that repeat across allocations are shared
(application ids and namespaces interned, equal resources one object), which bounds the cache's memory. The
records are equal to `convert.allocation_from`'s (tests/api/test_api_recovery_decode.py holds them so).
"""

from __future__ import annotations

import sys

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.state.records import Allocation, LedgerView, Phase
from qos.model import Resources, Source

_SOURCE = convert.SOURCE_FROM_PB
_PHASE = convert.PHASE_FROM_PB
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

    def allocations(self, msgs: object) -> tuple[Allocation, ...]:
        shared = self._resources
        intern, source_of, phase_of = sys.intern, _SOURCE.get, _PHASE.get
        local, running = Source.LOCAL, Phase.RUNNING
        out = []
        for m in msgs:  # type: ignore[attr-defined]
            r = m.resources
            rk = (r.milli_cpu, r.memory_bytes)
            res = shared.get(rk)
            if res is None:
                res = Resources(*rk)
                if len(shared) < _SHARED_RESOURCES:
                    shared[rk] = res
            tags = m.tags
            out.append(Allocation(
                m.key, intern(m.application_id), source_of(m.source, local), res, phase_of(m.phase, running),
                m.priority, m.cgroup, m.name, intern(m.namespace), m.created_unix_ms / 1000.0,
                m.started_unix_ms / 1000.0, m.scheduler_epoch, m.request_id,
                tuple([(t.key, t.value) for t in tags]) if tags else (), m.revision,
            ))
        return tuple(out)
