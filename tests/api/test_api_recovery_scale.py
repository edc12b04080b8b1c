"""What lets recovery scale without changing what it means: totals kept as nodes and allocations change
(equal, after every step, to counting the cache again), and a node's lost clock that starts at its first
attempt, not while it waits for a slot behind slow nodes."""

from __future__ import annotations

import asyncio
import gc
import random
import socket
import time

from kit.api import app_id, cid, short_dir
from servekit import snap, workload

from agent.api.server import start_api_server
from agent.config.api import ApiConfig
from agent.recovery import Cluster, NodeState, ProtocolError, Recovery, RecoveryConfig, SchedulerState
from agent.state import Event, EventType, Ledger, LedgerConfig, LedgerView
from agent.state.records import Allocation, Application, Identity, NodeRecord, Phase
from qos.model import Resources, Source


def _alloc(app: int, seq: int, rev: int, cpu: int) -> Allocation:
    return Allocation(key=f"yarn/{cid(app, seq)}", application_id=app_id(app), source=Source.YARN,
                      resources=Resources(cpu, cpu << 20), phase=Phase.RUNNING, revision=rev)


def _view(node: str, rev: int, allocs: list[Allocation]) -> LedgerView:
    apps = sorted({a.application_id for a in allocs} | {app_id(1)})
    return LedgerView(Identity(node, f"inc-{rev}", "boot", 0.0), rev, 0, NodeRecord(node, revision=1),
                      tuple(Application(a, Source.YARN, 0.0, 1) for a in apps), tuple(allocs), 0.0)


def _recount(cl: Cluster) -> dict[str, int]:
    counted = cl.counted()
    return {
        "nodes": len(cl.nodes),
        "recovered": len(cl.by_state(NodeState.RECOVERED)),
        "lost": len(cl.by_state(NodeState.LOST)),
        "recovering": len(cl.by_state(NodeState.RECOVERING)),
        "applications": len({a.application_id for _, a in counted}),
        "allocations": len(counted),
        "allocated_milli_cpu": sum(a.resources.milli_cpu for _, a in counted),
        "allocated_memory_bytes": sum(a.resources.memory_bytes for _, a in counted),
        "conflicts": len(cl.conflicts),
    }


def test_totals_follow_every_change_as_a_recount_would() -> None:
    rnd = random.Random(34)
    nodes = [f"n{i}" for i in range(4)]
    cl = Cluster(nodes)
    for step in range(600):
        at = rnd.choice(nodes)
        nc = cl.nodes[at]
        op = rnd.random()
        # Keys overlap across nodes (conflicts), apps 1..3, resources vary (a MODIFIED changes them).
        key = (rnd.randint(1, 3), rnd.randint(1, 6))
        if op < 0.1:
            allocs = {(a.application_id, a.key): a for a in (
                _alloc(rnd.randint(1, 3), rnd.randint(1, 6), 1, rnd.randint(1, 500)) for _ in range(5))}
            cl.load_snapshot(at, _view(at, step + 1, list(allocs.values())))
            nc.revision = step + 1
        elif op < 0.25:
            nc.state = rnd.choice(list(NodeState))
        elif nc.identity is not None:
            if op < 0.65:
                added = _alloc(*key, nc.revision + 1, rnd.randint(1, 500))
                ev = Event(nc.revision + 1, EventType.ADDED, added, 0.0)
            else:
                ev = Event(nc.revision + 1, EventType.DELETED, _alloc(*key, nc.revision + 1, 1), 0.0)
            try:
                cl.apply(at, ev)
            except ProtocolError:
                nc.revision += 1  # an allocation of an application the node does not have: not applied
        assert cl.totals() == _recount(cl), step
    assert cl.totals()["allocations"] > 0 and cl.conflicts  # the walk did count and did conflict


async def test_a_node_waiting_for_a_slot_is_not_lost() -> None:
    """One slot; the first node accepts connections and never answers, so it holds the slot for the call's
    deadline (1 s), longer than `lost_after_s` (0.6 s). The nodes behind it are recovered, not lost. The
    cyclic collector is paused from start to Running."""
    with short_dir() as d:
        hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        hung.bind(str(d / "hung.sock"))
        hung.listen(8)
        agents = []
        for i in range(2):
            led = Ledger.open(LedgerConfig(node_id=f"n{i}", state_path=str(d / f"n{i}.json")))
            led.sync(snap([workload(1 + i, s) for s in range(3)]), Resources(2000, 4 << 30), time.time())
            agents.append((led, await start_api_server(led, ApiConfig(socket_path=str(d / f"n{i}.sock")))))
        addrs = [str(d / "hung.sock")] + [str(d / f"n{i}.admin.sock") for i in range(2)]
        rec = Recovery(addrs, RecoveryConfig(epoch=3, parallel=1, lost_after_s=0.6, rpc_timeout_s=1.0,
                                             retry_initial_s=0.5))
        try:
            assert gc.isenabled()
            await rec.start()
            assert not gc.isenabled()  # paused during the initial sync (its records are long-lived)
            async with asyncio.timeout(20):
                assert await rec.wait_running() is SchedulerState.RUNNING
            assert gc.isenabled()  # and on again at Running
            states = {a: rec.cluster.nodes[a].state for a in addrs}
            assert states == {addrs[0]: NodeState.LOST, addrs[1]: NodeState.RECOVERED,
                              addrs[2]: NodeState.RECOVERED}
            assert rec.running_after_s is not None and rec.running_after_s >= 1.0  # n0 did wait for the slot
            assert rec.cluster.totals()["allocations"] == 6
        finally:
            await rec.stop()
            for led, srv in agents:
                await srv.stop(0)
                await led.close()
            hung.close()
