"""The Snapshot bytes the server sends, joined from cached pieces, against protobuf's own encoding of the same
view, at every revision of a ledger whose allocations are added, changed, moved between applications and
removed (a cached piece of a record that changed must never be sent again)."""

from __future__ import annotations

import time
from pathlib import Path

from kit.snapshot import application_id, container_id, node_snapshot, workload, yarn_container

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.service import NodeAgentService
from agent.api.wire import Encoder
from agent.state import Event, EventType, Ledger, LedgerConfig
from agent.state.records import LedgerView
from qos.model import Resources, Workload

BIG = Resources(1 << 40, 1 << 60)


def reference(view: LedgerView) -> pb.Snapshot:
    return pb.Snapshot(
        identity=convert.identity_pb(view.identity), revision=view.revision,
        oldest_watchable_revision=view.oldest_watchable_revision, taken_unix_ms=convert.ms(view.taken_at),
        node=convert.node_pb(view.node),
        applications=[convert.application_pb(a) for a in view.applications],
        allocations=[convert.allocation_pb(a) for a in view.allocations])


def test_snapshot_bytes_match_protobuf_at_every_revision(tmp_path: Path) -> None:
    ledger = Ledger.open(LedgerConfig(node_id="wire-node", state_path=str(tmp_path / "state")))
    enc = Encoder()

    def check() -> None:
        view = ledger.view()
        got = pb.Snapshot.FromString(enc.snapshot(view))
        assert got == reference(view), view.revision
        assert enc.snapshot(view) is enc.snapshot(view)  # one encoding per revision

    def sync(*ws: Workload) -> None:
        ledger.sync(node_snapshot(ws, capacity=BIG), BIG, time.time())
        check()

    sync()
    first = [yarn_container(1, seq, request_cpu=100, request_mem=1 << 28) for seq in range(1, 6)]
    sync(*first)
    # two change their requests, one moves to another application, one goes, one comes
    moved = workload(f"yarn/{container_id(1, 4)}", app_id=application_id(9), request_cpu=100,
                     request_mem=1 << 28)
    changed = [first[0], yarn_container(1, 2, request_cpu=300, request_mem=1 << 28),
               yarn_container(1, 3, request_cpu=100, request_mem=1 << 30), moved,
               yarn_container(2, 1, request_cpu=50, request_mem=1 << 28)]
    sync(*changed)
    assert {a.application_id for a in ledger.view().applications} == {
        application_id(1), application_id(2), application_id(9)}
    # everything goes, then the first ones come back (same keys, new records)
    sync()
    sync(*first)
    for n in range(200):  # past the caches' pruning bound (twice the live set + 64)
        sync(yarn_container(3, n + 1, request_cpu=10, request_mem=1 << 20))


def test_the_encoded_event_cache_is_no_bigger_than_the_ring(tmp_path: Path) -> None:
    """An event the ring no longer holds is never served again (a resume from before it must relist), so
    the service caches at most as many encoded events as the ring holds."""
    ledger = Ledger.open(LedgerConfig(node_id="ring-node", state_path=str(tmp_path / "state"), ring_size=16))
    service = NodeAgentService(ledger, max_streams=1, bookmark_interval_s=1.0, max_events_per_message=64,
                               max_message_bytes=1 << 20)
    node = ledger.view().node
    for revision in range(1, 1001):
        service._enc.event("inc", Event(revision, EventType.MODIFIED, node, time.time()))
    assert len(service._enc._events) == ledger.cfg.ring_size == 16
    assert min(rev for _, rev in service._enc._events) == 1000 - 16 + 1  # the newest ones


def test_a_watch_only_node_forgets_the_encodings_of_deleted_records(tmp_path: Path) -> None:
    """Encodings of records are cached for every watcher; a record's DELETED event drops them, so a node whose
    clients only Watch (no Snapshot, whose prune would drop them) keeps the live records' encodings only."""
    ledger = Ledger.open(LedgerConfig(node_id="watch-node", state_path=str(tmp_path / "state")))
    enc = Encoder()
    before: list[Event] = []
    revisions = iter(range(1, 1 << 20))  # each event its own revision, as the ledger's are
    for n in range(1000):  # a new container (and application) each time, the previous one gone
        only = yarn_container(n + 1, 1, request_cpu=10, request_mem=1 << 20)
        ledger.sync(node_snapshot([only], capacity=BIG), BIG, time.time())
        view = ledger.view()
        now = [Event(next(revisions), EventType.ADDED, obj, time.time())
               for obj in (*view.applications, *view.allocations)]
        for ev in now:
            enc.event("inc", ev)
        for ev in before:
            enc.event("inc", Event(next(revisions), EventType.DELETED, ev.obj, time.time()))
        before = now
    assert len(enc._allocs) <= 1 and len(enc._apps) <= 1, (len(enc._allocs), len(enc._apps))
