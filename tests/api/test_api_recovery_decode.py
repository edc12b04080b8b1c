"""The recovery's bulk decoder gives the records `agent.api.convert` gives, field for field, so the two
mappings cannot drift apart unnoticed (a field added to the message is set here by its descriptor)."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from agent.api import convert
from agent.api.client import view_from
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery.decode import Decoder


def _filled(m: pb.Allocation, n: int) -> pb.Allocation:
    """Every field of `m` set to a value other than its default (the last value of an enum)."""
    for f in m.DESCRIPTOR.fields:
        if f.is_repeated:
            for i in range(2):
                tag = getattr(m, f.name).add()
                tag.key, tag.value = f"k{n}.{i}", f"v{n}.{i}"
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            sub = getattr(m, f.name)
            sub.milli_cpu, sub.memory_bytes = 250 + n, (1 << 20) * (n + 1)
        elif f.type == FieldDescriptor.TYPE_STRING:
            setattr(m, f.name, f"{f.name}-{n}")
        elif f.enum_type is not None:
            setattr(m, f.name, f.enum_type.values[-1].number)
        elif f.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64):
            setattr(m, f.name, 1_700_000_000_123 + n)
        else:
            setattr(m, f.name, 3000 + n)
    return m


def test_every_field_decodes_as_convert_does() -> None:
    msgs = [_filled(pb.Allocation(), n) for n in range(3)]
    msgs.append(pb.Allocation(key="yarn/empty", application_id="a"))  # defaults, no tags, no resources
    odd = pb.Allocation(key="local/odd", application_id="a")
    odd.source, odd.phase = 99, 77  # type: ignore[assignment]  # unknown enum values: open enums keep them
    msgs.append(odd)
    assert list(Decoder().allocations(msgs)) == [convert.allocation_from(m) for m in msgs]
    assert len(set(Decoder().allocations(msgs))) == len(msgs)  # nothing shared that should not be


def test_a_snapshot_decodes_as_the_client_does_and_repeats_are_shared() -> None:
    snap = pb.Snapshot(revision=9, oldest_watchable_revision=2, taken_unix_ms=1_700_000_000_500)
    snap.identity.node_id, snap.identity.incarnation = "node-a", "inc-1"
    snap.node.node_id, snap.node.batch_allocatable.milli_cpu = "node-a", 4000
    snap.applications.add(application_id="app-1", source=pb.SOURCE_K8S, created_unix_ms=5)
    for i in range(4):
        a = _filled(snap.allocations.add(), 0)
        a.key, a.application_id = f"k8s/uid-{i}", "app-1"
    dec = Decoder()
    view = dec.view(snap)
    assert view == view_from(snap)
    allocs = view.allocations
    assert all(a.resources is allocs[0].resources for a in allocs)  # one object for equal resources
    assert all(a.application_id is allocs[0].application_id for a in allocs)
    assert dec.view(snap).allocations[0].resources is allocs[0].resources  # across snapshots too
