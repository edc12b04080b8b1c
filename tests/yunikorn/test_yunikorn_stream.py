"""`si_stream`: the same messages as one batch, cut into messages of at most `batch` items, in the same order
and with the same notes; made as they are read, so what it holds is one message, not every allocation."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from sikit import parse_output

from agent.recovery.cluster import Cluster, NodeState
from agent.recovery.yunikorn import si_messages, si_stream
from agent.state.records import Allocation, Application, Identity, LedgerView, NodeRecord, Phase
from qos.model import Resources, Source


def _cluster(nodes: int, per_node: int) -> Cluster:
    """Pods (one application per 7 of them, some admitted with a bad user name, some empty) on each node."""
    addrs = [f"/run/n{i}.sock" for i in range(nodes)]
    cl = Cluster(addrs)
    for i, addr in enumerate(addrs):
        allocs = tuple(
            Allocation(key=f"k8s/uid-{i:03d}-{s:05d}", application_id=f"app-{(i * per_node + s) // 7}",
                       source=Source.K8S, resources=Resources() if s % 11 == 5 else Resources(100, 1 << 20),
                       phase=Phase.RUNNING, name=f"pod-{s}", namespace="batch", scheduler_epoch=s % 2,
                       created_at=1_700_000_000.0 + s % 13,
                       tags=(("yunikorn.apache.org/username", "bad name" if s % 17 == 3 else "bob"),))
            for s in range(per_node))
        apps = tuple(Application(k, Source.K8S, 1.0) for k in sorted({a.application_id for a in allocs}))
        node = NodeRecord(f"node-{i:03d}", batch_allocatable=Resources(4000, 8 << 30))
        ident = Identity(node.node_id, "inc", "boot", 1.0)
        cl.load_snapshot(addr, LedgerView(ident, 5, 1, node, apps, allocs, 2.0))
        cl.nodes[addr].state = NodeState.RECOVERED
    return cl


def _items(msgs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Every node, application and allocation in message order, with the kind of message it came in."""
    out: list[tuple[str, Any]] = []
    for m in msgs:
        (name, body), = m.items()
        lists = [v for v in body.values() if isinstance(v, list)]
        out += [(name, x) for x in lists[0]] if lists else [(name, body)]
    return out


@pytest.mark.parametrize("batch", [1, 3, 50])
def test_batches_hold_the_same_messages_in_the_same_order(batch: int) -> None:
    cl = _cluster(4, 40)
    whole = si_messages(cl, "rm", version="9.9")
    notes: list[str] = []
    cut = list(si_stream(cl, "rm", version="9.9", batch=batch, on_note=notes.append))
    assert _items(cut) == _items(whole.messages)
    assert notes == whole.notes and any("invalid username" in n for n in notes)
    assert any("skipped on node" in n for n in notes)
    kinds = [next(iter(m)) for m in cut]
    # The replay order holds: register, every CREATE_DRAIN, applications, allocations, then schedulable.
    runs = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert runs == ["RegisterResourceManagerRequest", "NodeRequest", "ApplicationRequest",
                    "AllocationRequest", "NodeRequest"]
    assert len(cut) > len(runs)  # 160 allocations: more than one AllocationRequest at each size
    for m in cut[1:]:
        (_, body), = m.items()
        assert 1 <= len(next(v for v in body.values() if isinstance(v, list))) <= batch
    originators = [a for _, a in _items(cut) if isinstance(a, dict) and a.get("originator")]
    assert len(originators) == len({a["applicationID"] for a in originators})
    assert len(parse_output("\n".join(json.dumps(m) for m in cut))) == len(cut)  # si.proto v1.8.0


def test_the_stream_holds_one_message_not_the_cluster() -> None:
    cl = _cluster(20, 1000)
    tracemalloc.start()
    try:
        biggest = 0
        for m in si_stream(cl, "rm", batch=100):
            biggest = max(biggest, len(json.dumps(m)))
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = si_messages(cl, "rm")
        _, collected = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(len(a["AllocationRequest"]["allocations"]) for a in whole.messages
               if "AllocationRequest" in a) > 15_000
    assert streamed < collected / 10, (streamed, collected)


def test_a_batch_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch: must be ≥ 1, got 0"):
        next(si_stream(Cluster(["a"]), "rm", batch=0))
