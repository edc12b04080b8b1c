"""Serialized `coloc.v1` messages built from cached pieces.

A record is immutable, so its encoding is computed once and reused by every snapshot and by every watcher
that receives it. A snapshot of 1,000 allocations is then a join of cached byte strings, and an event
sent to 100 watchers is encoded once. Protobuf allows this: a message is the concatenation of its encoded
fields, and a repeated or embedded message field is `tag, length, bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
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

_LEN, _VARINT = 2, 0


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | _LEN) + varint(len(payload)) + payload


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | _VARINT) + varint(value) if value else b""


def field_string(number: int, value: str) -> bytes:
    return field_bytes(number, value.encode()) if value else b""


# Event field numbers (agent.proto `Event`, `WatchResponse`, `Snapshot`).
_EV_REVISION, _EV_TYPE, _EV_NODE, _EV_APP, _EV_ALLOC, _EV_NOTICE, _EV_REASON, _EV_AT = 1, 2, 3, 4, 5, 6, 7, 8
_WR_EVENTS = 1
(_SN_IDENTITY, _SN_REVISION, _SN_OLDEST, _SN_TAKEN, _SN_NODE, _SN_APPS, _SN_ALLOCS) = (1, 2, 3, 4, 5, 6, 7)


class Encoder:
    """Caches encodings: per record (by identity of the immutable object), per event revision, per view."""

    def __init__(self, event_cache: int = 8192) -> None:
        self._allocs: dict[str, tuple[Allocation, bytes]] = {}
        self._apps: dict[str, tuple[Application, bytes]] = {}
        self._node: tuple[NodeRecord, bytes] | None = None
        self._identity: tuple[Identity, bytes] | None = None
        self._events: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._event_cache = event_cache
        self._snapshot: tuple[str, int, bytes] | None = None
        # A record as a field of Snapshot (tag and length in front), by key: a new revision changes a few
        # records, and framing all of them again took 2 of the 2.3 ms a snapshot of 1,000 allocations cost.
        self._alloc_fields: dict[str, tuple[Allocation, bytes]] = {}
        self._app_fields: dict[str, tuple[Application, bytes]] = {}

    def allocation(self, a: Allocation) -> bytes:
        hit = self._allocs.get(a.key)
        if hit is not None and hit[0] is a:
            return hit[1]
        data = convert.allocation_pb(a).SerializeToString()
        self._allocs[a.key] = (a, data)
        return data

    def application(self, a: Application) -> bytes:
        hit = self._apps.get(a.application_id)
        if hit is not None and hit[0] is a:
            return hit[1]
        data = convert.application_pb(a).SerializeToString()
        self._apps[a.application_id] = (a, data)
        return data

    def node(self, n: NodeRecord) -> bytes:
        if self._node is not None and self._node[0] is n:
            return self._node[1]
        data = convert.node_pb(n).SerializeToString()
        self._node = (n, data)
        return data

    def identity(self, i: Identity) -> bytes:
        if self._identity is not None and self._identity[0] is i:
            return self._identity[1]
        data = convert.identity_pb(i).SerializeToString()
        self._identity = (i, data)
        return data

    def _object(self, obj: NodeRecord | Application | Allocation | Notice) -> bytes:
        if isinstance(obj, Allocation):
            return field_bytes(_EV_ALLOC, self.allocation(obj))
        if isinstance(obj, Application):
            return field_bytes(_EV_APP, self.application(obj))
        if isinstance(obj, NodeRecord):
            return field_bytes(_EV_NODE, self.node(obj))
        return field_bytes(_EV_NOTICE, convert.notice_pb(obj).SerializeToString())

    def event(self, incarnation: str, ev: Event) -> bytes:
        """One `Event`, cached by (incarnation, revision): encoded once for all watchers."""
        key = (incarnation, ev.revision)
        hit = self._events.get(key)
        if hit is not None:
            return hit
        data = (field_varint(_EV_REVISION, ev.revision) + field_varint(_EV_TYPE, convert.EVENT_TO_PB[ev.type])
                + self._object(ev.obj) + field_string(_EV_REASON, ev.reason)
                + field_varint(_EV_AT, convert.ms(ev.at)))
        self._events[key] = data
        if len(self._events) > self._event_cache:
            self._events.popitem(last=False)
        if ev.type is EventType.DELETED:  # gone: its encodings would linger until the next snapshot's prune,
            self._forget(ev.obj)  # and a node that only serves Watch (no Snapshot) would keep every one
        return data

    def _forget(self, obj: NodeRecord | Application | Allocation | Notice) -> None:
        if isinstance(obj, Allocation):
            self._allocs.pop(obj.key, None)
            self._alloc_fields.pop(obj.key, None)
        elif isinstance(obj, Application):
            self._apps.pop(obj.application_id, None)
            self._app_fields.pop(obj.application_id, None)

    def initial(self, revision: int, obj: NodeRecord | Application | Allocation) -> bytes:
        """An ADDED event of the initial list: the object as of `revision`."""
        return (field_varint(_EV_REVISION, revision) + field_varint(_EV_TYPE, pb.EVENT_TYPE_ADDED)
                + self._object(obj))

    @staticmethod
    def marker(revision: int, type_: int) -> bytes:
        """A BOOKMARK or INITIAL_SYNC_END event (no object)."""
        return field_varint(_EV_REVISION, revision) + field_varint(_EV_TYPE, type_)

    @staticmethod
    def watch_response(events: Iterable[bytes]) -> bytes:
        return b"".join(field_bytes(_WR_EVENTS, e) for e in events)

    def snapshot(self, view: LedgerView) -> bytes:
        """The whole `Snapshot` message for a view, cached per (incarnation, revision)."""
        inc = view.identity.incarnation
        if self._snapshot is not None and self._snapshot[:2] == (inc, view.revision):
            return self._snapshot[2]
        parts = [field_bytes(_SN_IDENTITY, self.identity(view.identity)),
                 field_varint(_SN_REVISION, view.revision),
                 field_varint(_SN_OLDEST, view.oldest_watchable_revision),
                 field_varint(_SN_TAKEN, convert.ms(view.taken_at)),
                 field_bytes(_SN_NODE, self.node(view.node))]
        app_fields, alloc_fields = self._app_fields, self._alloc_fields
        for a in view.applications:
            hit = app_fields.get(a.application_id)
            if hit is None or hit[0] is not a:
                hit = app_fields[a.application_id] = (a, field_bytes(_SN_APPS, self.application(a)))
            parts.append(hit[1])
        for al in view.allocations:
            got = alloc_fields.get(al.key)
            if got is None or got[0] is not al:
                got = alloc_fields[al.key] = (al, field_bytes(_SN_ALLOCS, self.allocation(al)))
            parts.append(got[1])
        data = b"".join(parts)
        self._snapshot = (inc, view.revision, data)
        self._prune(view)
        return data

    def _prune(self, view: LedgerView) -> None:
        # Deleted records linger in the per-record caches; rebuild them past twice the live set.
        if len(self._allocs) > 2 * len(view.allocations) + 64:
            live = {a.key for a in view.allocations}
            self._allocs = {k: v for k, v in self._allocs.items() if k in live}
            self._alloc_fields = {k: v for k, v in self._alloc_fields.items() if k in live}
        if len(self._apps) > 2 * len(view.applications) + 64:
            live = {a.application_id for a in view.applications}
            self._apps = {k: v for k, v in self._apps.items() if k in live}
            self._app_fields = {k: v for k, v in self._app_fields.items() if k in live}
