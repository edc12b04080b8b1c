"""A snapshot message applied to the recovery cache as it is: the rules (unknown application, one owner per
key) and the totals hold at once; each allocation becomes the record `convert` gives when first read."""

from __future__ import annotations

import gc

import pytest
from kit.api import app_id, cid

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery import Cluster, NodeState, ProtocolError, allocations
from agent.state import Event, EventType
from agent.state.records import Allocation, Application, Identity, NodeRecord, Phase
from qos.model import Resources, Source


def alloc(app: int, seq: int, rev: int, cpu: int = 100) -> Allocation:
    return Allocation(key=f"yarn/{cid(app, seq)}", application_id=app_id(app), source=Source.YARN,
                      resources=Resources(cpu, 1 << 20), phase=Phase.RUNNING, name=f"c{seq}",
                      tags=(("queue", "q"),), revision=rev)


def message(node: str, inc: str, rev: int, allocs: list[Allocation],
            apps: list[int] | None = None) -> pb.Snapshot:
    m = pb.Snapshot(identity=convert.identity_pb(Identity(node, inc, "boot", 0.0)), revision=rev,
                    node=convert.node_pb(NodeRecord(node, revision=1)))
    for a in sorted({app_id(n) for n in apps} if apps is not None else {a.application_id for a in allocs}):
        m.applications.append(convert.application_pb(Application(a, Source.YARN, 0.0, 1)))
    m.allocations.extend(convert.allocation_pb(a) for a in allocs)
    return m


def test_a_message_applies_checks_and_counts_without_making_records(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    convert_one = allocations.DECODER.allocation
    monkeypatch.setattr(allocations.DECODER, "allocation",
                        lambda m, key=None: made.append(m.key) or convert_one(m, key))
    cl = Cluster(["a", "b"])
    cl.load_snapshot("a", message("na", "i1", 5, [alloc(1, 1, 3, 100), alloc(1, 2, 4, 250)]))
    nc = cl.nodes["a"]
    assert nc.node_id == "na" and nc.incarnation == "i1" and nc.revision == 5
    nc.state = NodeState.RECOVERED
    t = cl.totals()
    assert (t["allocations"], t["allocated_milli_cpu"], t["applications"]) == (2, 350, 1)
    # The other node reports a key that a holds: kept on a, a conflict; b's own key counts on b.
    cl.load_snapshot("b", message("nb", "i2", 2, [alloc(1, 2, 2), alloc(2, 1, 2, 40)]))
    cl.nodes["b"].state = NodeState.RECOVERED
    assert cl.owner[f"yarn/{cid(1, 2)}"] == "a" and len(cl.conflicts) == 1
    assert cl.totals()["allocations"] == 3 and cl.totals()["allocated_milli_cpu"] == 390
    assert made == []  # applied and counted, nothing converted
    assert nc.allocations[f"yarn/{cid(1, 2)}"].resources == Resources(250, 1 << 20)
    assert made == [f"yarn/{cid(1, 2)}"]
    with pytest.raises(ProtocolError, match="unknown application"):
        cl.load_snapshot("b", message("nb", "i2", 3, [alloc(3, 1, 3)], apps=[1]))


def test_each_allocation_is_the_converted_record_once_read() -> None:
    allocs = [alloc(1, 1, 3), alloc(1, 2, 4, 250)]
    cl = Cluster(["a"])
    cl.load_snapshot("a", message("na", "i1", 5, allocs))
    nc = cl.nodes["a"]
    first = nc.allocations[allocs[0].key]
    assert first == allocs[0] and nc.allocations[allocs[0].key] is first  # converted once, then kept
    assert dict(nc.allocations) == {a.key: a for a in allocs}
    assert [a for _, a in cl.counted()] == [] and len(nc.allocations) == 2
    nc.state = NodeState.RECOVERED
    assert sorted(a.key for _, a in cl.counted()) == sorted(a.key for a in allocs)


def test_events_on_a_message_loaded_node_keep_the_totals() -> None:
    cl = Cluster(["a"])
    cl.load_snapshot("a", message("na", "i1", 5, [alloc(1, 1, 3, 100), alloc(1, 2, 4, 250)]))
    nc = cl.nodes["a"]
    nc.state = NodeState.RECOVERED
    cl.apply("a", Event(6, EventType.DELETED, alloc(1, 1, 6), 0.0))  # still a message: no record needed
    cl.apply("a", Event(7, EventType.MODIFIED, alloc(1, 2, 7, 300), 0.0))
    cl.apply("a", Event(8, EventType.ADDED, alloc(1, 3, 8, 5), 0.0))
    assert sorted(nc.allocations) == [f"yarn/{cid(1, 2)}", f"yarn/{cid(1, 3)}"]
    assert cl.totals()["allocations"] == 2 and cl.totals()["allocated_milli_cpu"] == 305
    assert f"yarn/{cid(1, 1)}" not in cl.owner
    # A new snapshot replaces the cache and the totals, message or not.
    cl.load_snapshot("a", message("na", "i2", 1, [alloc(1, 4, 1, 7)]))
    assert list(nc.allocations) == [f"yarn/{cid(1, 4)}"] and cl.totals()["allocated_milli_cpu"] == 7


def test_a_node_read_whole_lets_its_message_go() -> None:
    allocs = [alloc(1, 1, 3), alloc(1, 2, 4), alloc(1, 3, 5)]
    m = message("na", "i1", 5, allocs)
    cl = Cluster(["a"])
    cl.load_snapshot("a", m)
    held = cl.nodes["a"].allocations
    container = type(m.allocations)

    def holds_message() -> bool:
        return any(isinstance(r, container) for r in gc.get_referents(held))

    assert holds_message()
    assert held[allocs[0].key] == allocs[0]
    del held[allocs[1].key]
    assert holds_message()  # one still to convert
    held[allocs[2].key] = alloc(1, 3, 6)  # replaced by an event's record
    assert not holds_message() and dict(held) == {allocs[0].key: allocs[0], allocs[2].key: alloc(1, 3, 6)}
    assert (held.milli_cpu, held.applications) == (200, {app_id(1): 2})


def test_keys_held_by_two_other_nodes_stay_with_them_in_the_order_reported() -> None:
    cl = Cluster(["a", "b", "c"])
    cl.load_snapshot("a", message("na", "i1", 3, [alloc(1, 1, 1, 100), alloc(1, 2, 2, 200)]))
    cl.load_snapshot("b", message("nb", "i2", 3, [alloc(2, 1, 1, 10)]))
    for nc in cl.nodes.values():
        nc.state = NodeState.RECOVERED
    before = cl.totals()
    # c reports b's key, one of a's (twice) and one of its own.
    cl.load_snapshot("c", message("nc", "i3", 9, [alloc(2, 1, 4, 1), alloc(1, 2, 5, 2), alloc(3, 1, 6, 30),
                                                  alloc(1, 2, 7, 3)]))
    k = {name: f"yarn/{cid(app, seq)}" for name, app, seq in
         (("a1", 1, 1), ("a2", 1, 2), ("b1", 2, 1), ("c1", 3, 1))}
    assert cl.conflicts == [f"{k['b1']} reported by c while held by b; kept on b",
                            f"{k['a2']} reported by c while held by a; kept on a"]
    assert cl.owner == {k["a1"]: "a", k["a2"]: "a", k["b1"]: "b", k["c1"]: "c"}
    assert list(cl.nodes["c"].allocations) == [k["c1"]]
    assert cl.nodes["c"].allocations[k["c1"]].resources.milli_cpu == 30
    assert sorted(cl.nodes["a"].allocations) == [k["a1"], k["a2"]]
    assert list(cl.nodes["b"].allocations) == [k["b1"]]
    after = cl.totals()
    assert after["allocations"] == before["allocations"] + 1 == 4
    assert after["allocated_milli_cpu"] == before["allocated_milli_cpu"] + 30 == 340
    assert after["applications"] == 3
    # c's next snapshot without the disputed keys is no conflict, and a dropping its key frees it for c.
    cl.load_snapshot("a", message("na", "i1", 4, [alloc(1, 1, 1, 100)]))
    cl.load_snapshot("c", message("nc", "i3", 10, [alloc(1, 2, 8, 2), alloc(3, 1, 6, 30)]))
    assert len(cl.conflicts) == 2 and cl.owner[k["a2"]] == "c"
    assert cl.totals()["allocated_milli_cpu"] == 100 + 10 + 2 + 30
