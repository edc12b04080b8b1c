"""The scheduler-side cache and recovery driver against in-process agents (ledgers fed by hand).

The acceptance test with real agent processes and real cgroups is test_api_recovery_agents.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from kit.api import app_id, cid, short_dir
from servekit import snap, workload

from agent.api.server import start_api_server
from agent.cli.recover import cluster_json, main, read_agents
from agent.config.api import ApiConfig
from agent.recovery import Cluster, NodeState, ProtocolError, Recovery, RecoveryConfig, SchedulerState
from agent.recovery.yunikorn import si_messages
from agent.state import Event, EventType, Ledger, LedgerConfig, LedgerView, Lifecycle
from agent.state.records import Allocation, Application, Identity, NodeRecord, Phase
from qos.model import Resources, Source


def alloc(app: int, seq: int, rev: int) -> Allocation:
    return Allocation(
        key=f"yarn/{cid(app, seq)}",
        application_id=app_id(app),
        source=Source.YARN,
        resources=Resources(100, 1 << 20),
        phase=Phase.RUNNING,
        revision=rev,
    )


def view(node: str, inc: str, rev: int, allocs: list[Allocation]) -> LedgerView:
    apps = sorted({a.application_id for a in allocs})
    return LedgerView(
        Identity(node, inc, "boot", 0.0),
        rev,
        0,
        NodeRecord(node, revision=1),
        tuple(Application(a, Source.YARN, 0.0, 1) for a in apps),
        tuple(allocs),
        0.0,
    )


def test_cache_applies_in_order_and_counts_each_key_once() -> None:
    cl = Cluster(["a", "b"])
    cl.load_snapshot("a", view("na", "i1", 5, [alloc(1, 1, 3), alloc(1, 2, 4)]))
    cl.nodes["a"].state = NodeState.RECOVERED
    cl.apply("a", Event(6, EventType.ADDED, alloc(1, 3, 6), 0.0))
    with pytest.raises(ProtocolError, match="gap or repeat"):
        cl.apply("a", Event(6, EventType.ADDED, alloc(1, 3, 6), 0.0))  # a replayed event
    with pytest.raises(ProtocolError, match="gap or repeat"):
        cl.apply("a", Event(9, EventType.ADDED, alloc(1, 4, 9), 0.0))
    with pytest.raises(ProtocolError, match="unknown application"):
        cl.apply("a", Event(7, EventType.ADDED, alloc(2, 1, 7), 0.0))
    cl.apply("a", Event(7, EventType.DELETED, alloc(1, 1, 7), 0.0))
    assert sorted(cl.nodes["a"].allocations) == [f"yarn/{cid(1, 2)}", f"yarn/{cid(1, 3)}"]
    # Node b reports a key that node a holds: kept once, on a, and recorded as a conflict.
    cl.load_snapshot("b", view("nb", "i2", 2, [alloc(1, 2, 2)]))
    cl.nodes["b"].state = NodeState.RECOVERED
    assert len(cl.counted()) == 2 and cl.owner[f"yarn/{cid(1, 2)}"] == "a" and len(cl.conflicts) == 1
    # A new snapshot of a replaces its cache: nothing counted twice, nothing left over.
    cl.load_snapshot("a", view("na", "i3", 1, [alloc(1, 3, 1)]))
    assert [k for _, a in cl.counted() for k in [a.key]] == [f"yarn/{cid(1, 3)}"]
    assert cl.totals()["allocations"] == 1


async def _agent(d: Path, name: str, n: int, base: int = 0) -> tuple[Ledger, object]:
    led = Ledger.open(LedgerConfig(node_id=name, state_path=str(d / f"{name}.json")))
    led.sync(snap([workload(base + 1 + i % 3, i) for i in range(n)]), Resources(2000, 4 << 30), time.time())
    server = await start_api_server(led, ApiConfig(socket_path=str(d / f"{name}.sock")))
    return led, server


async def test_recovery_state_machine_lost_and_late_node() -> None:
    with short_dir() as d:
        agents = [await _agent(d, f"n{i}", 5 + i, base=10 * i) for i in range(3)]
        late = str(d / "late.admin.sock")  # recovery acknowledges: the admin sockets
        progress: list[tuple[str, str]] = []
        rec = Recovery(
            [str(d / f"n{i}.admin.sock") for i in range(3)] + [late],
            RecoveryConfig(epoch=10, lost_after_s=0.5, retry_max_s=0.1),
            on_progress=lambda p: progress.append((p.node_id or p.address, p.state)),
        )
        await rec.start()
        try:
            assert await rec.wait_running() is SchedulerState.RUNNING
            assert [s for who, s in progress if who == ""] == ["Registered", "Recovering", "Running"]
            assert rec.cluster.nodes[late].state is NodeState.LOST
            assert rec.cluster.totals()["allocations"] == 5 + 6 + 7
            for led, _ in agents:
                assert led.node.lifecycle is Lifecycle.SCHEDULABLE and led.node.acked_epoch == 10
            # The late agent comes up after the scheduler is running: it is recovered then.
            led4, srv4 = await _agent(d, "late", 4, base=100)
            agents.append((led4, srv4))
            assert await rec.wait_for(lambda c: c.nodes[late].state is NodeState.RECOVERED, 5.0)
            assert ("late", "recovered") in progress
            # Allocations keep changing; the scheduler's view follows.
            led4.sync(snap([workload(9, 1)]), Resources(2000, 4 << 30), time.time())
            assert await rec.wait_for(
                lambda c: sorted(c.nodes[late].allocations) == [f"yarn/{cid(9, 1)}"], 5.0
            )
            assert rec.cluster.totals()["allocations"] == 5 + 6 + 7 + 1
            assert rec.cluster.conflicts == []
            out = cluster_json(rec)
            assert out["scheduler_state"] == "Running" and out["totals"]["lost"] == 0
            si = si_messages(rec.cluster, "rm").messages
            kinds = [next(iter(r)) for r in si]
            assert kinds == ["RegisterResourceManagerRequest", "NodeRequest", "ApplicationRequest",
                             "AllocationRequest", "NodeRequest"]
            assert {n["action"] for n in si[1]["NodeRequest"]["nodes"]} == {"CREATE_DRAIN"}
            assert {n["action"] for n in si[4]["NodeRequest"]["nodes"]} == {
                "DRAIN_TO_SCHEDULABLE"
            }
            allocs = si[3]["AllocationRequest"]["allocations"]
            assert len(allocs) == 19 and all(a["nodeID"] for a in allocs)
            assert len({a["allocationKey"] for a in allocs}) == 19
            apps = {a["applicationID"] for a in si[2]["ApplicationRequest"]["new"]}
            assert {a["applicationID"] for a in allocs} <= apps
        finally:
            await rec.stop()
            for led, srv in agents:
                await srv.stop(0)  # type: ignore[attr-defined]
                await led.close()


async def test_a_newer_scheduler_fences_the_old_one() -> None:
    with short_dir() as d:
        led, srv = await _agent(d, "n0", 3)
        try:
            new = Recovery([str(d / "n0.admin.sock")], RecoveryConfig(epoch=20))
            await new.start()
            assert await new.wait_running() is SchedulerState.RUNNING
            await new.stop()
            old = Recovery([str(d / "n0.admin.sock")], RecoveryConfig(epoch=19))
            await old.start()
            assert await asyncio.wait_for(old.wait_running(), 5) is SchedulerState.FAILED
            assert "fenced" in old.failure and "epoch 19 is stale" in old.failure
            await old.stop()
        finally:
            await srv.stop(0)  # type: ignore[attr-defined]
            await led.close()


def test_agents_file_and_directory(tmp_path: Path) -> None:
    f = tmp_path / "agents"
    f.write_text("# the cluster\n/run/a.sock\n\nunix:/run/b.sock  # rack 2\n/run/a.sock\n")
    assert read_agents(str(f)) == ["/run/a.sock", "unix:/run/b.sock"]
    (tmp_path / "d").mkdir()
    for n in ("x.sock", "y.sock", "z.txt"):
        (tmp_path / "d" / n).write_text("")
    assert read_agents(str(tmp_path / "d")) == [
        str(tmp_path / "d" / "x.sock"),
        str(tmp_path / "d" / "y.sock"),
    ]
    for n in ("x.admin.sock", "admin.sock"):  # admin sockets beside them: only those (recovery mutates)
        (tmp_path / "d" / n).write_text("")
    assert read_agents(str(tmp_path / "d")) == [str(tmp_path / "d" / "admin.sock"),
                                                str(tmp_path / "d" / "x.admin.sock")]
    f.write_text("/run/a.sock /run/b.sock\n")
    assert main(["--agents", str(f)]) == 2
    assert main(["--agents", str(tmp_path / "missing")]) == 2


def test_recover_cli_prints_a_cluster_view(capsys: pytest.CaptureFixture[str]) -> None:
    with short_dir() as d:
        f = d / "agents"
        f.write_text(f"{d}/solo.admin.sock\n{d}/dead.admin.sock\n")

        async def scenario() -> int:
            led, srv = await _agent(d, "solo", 2)
            try:
                return await asyncio.to_thread(
                    main, ["--agents", str(f), "--epoch", "7", "--lost-after", "0.5", "--json"]
                )
            finally:
                await srv.stop(0)  # type: ignore[attr-defined]
                await led.close()

        code = asyncio.run(scenario())
    out = capsys.readouterr()
    assert code == 3  # running, with a lost node
    data = json.loads(out.out)
    states = {n["address"].rsplit("/", 1)[-1]: n["state"] for n in data["nodes"]}
    assert states == {"solo.admin.sock": "recovered", "dead.admin.sock": "lost"}
    assert data["totals"]["allocations"] == 2
    assert "solo: recovered" in out.err and "Running" in out.err
