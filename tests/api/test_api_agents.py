"""Acceptance tests of the node API against real agent processes on real unix sockets.

Each agent has its own node id, state file and private cgroup root; its allocations come from container
cgroups created under that root (found by the agent's cgroup scanner) and from admissions through the API.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from kit.api import Mirror, cid, short_dir
from kit.api import admit_request as req
from kit.fleet import Agent, stop_all
from kit.poll import until
from kit.realcg import RealRoot

from agent.api.client import AgentCallError, AgentClient, Marker
from agent.recovery import NodeState, Recovery, RecoveryConfig, SchedulerState
from agent.state import LedgerView, Lifecycle, Phase, Refusal

pytestmark = [pytest.mark.cgroups]

Factory = Callable[..., Agent]


@pytest.fixture
def make_agent(real_root: RealRoot) -> Iterator[Factory]:
    made: list[Agent] = []
    with short_dir() as d:

        def factory(node_id: str, settings: dict[str, object] | None = None, start: bool = True) -> Agent:
            a = Agent(real_root, d, node_id, settings)
            made.append(a)
            if start:
                a.start()
            return a

        try:
            yield factory
        finally:
            stop_all(made)


async def ack(c: AgentClient, epoch: int = 1) -> LedgerView:
    view = await c.get_snapshot()
    await c.ack_recovery(epoch, view.identity.incarnation, view.revision)
    return view


async def churn(agent: Agent, c: AgentClient, stop: asyncio.Event, rng: random.Random,
                n: dict[str, int] | None = None) -> dict[str, int]:
    """Containers come and go under the agent's root; launches are admitted through the API and start.
    `n` (the counts so far) is updated as it goes."""
    live: list[str] = []
    admitted: list[tuple[int, int]] = []
    n = {} if n is None else n
    n.update(created=0, removed=0, admitted=0)
    seq = 0
    while not stop.is_set():
        seq += 1
        roll = rng.random()
        if roll < 0.45 or not live:
            live.append(agent.add_container(1 + seq % 4, seq))
            n["created"] += 1
        elif roll < 0.8:
            agent.remove_container(live.pop(rng.randrange(len(live))))
            n["removed"] += 1
        elif roll < 0.9:
            # Small: the budget of a 2-CPU, 2 GiB node lasts however many rounds a fast machine runs.
            r = await c.admit(req(9, seq, cpu=1, mem=1 << 20), 1)
            assert r.accepted, r
            admitted.append((9, seq))
            n["admitted"] += 1
        elif admitted:
            app, s = admitted.pop(0)
            live.append(agent.add_container(app, s))  # the admitted launch starts
        await asyncio.sleep(rng.uniform(0.0, 0.01))
    return n


async def test_snapshot_and_watch_agree_at_every_revision_under_churn(make_agent: Factory) -> None:
    agent = make_agent("node-churn", {"loop.interval_s": 0.05, "api.bookmark_interval_s": 0.2})
    async with AgentClient(agent.address) as c, AgentClient(agent.address) as sampler:
        view = await ack(c)
        mirror = Mirror(view)
        stop = asyncio.Event()
        checked: set[int] = set()

        async def watch() -> None:
            async for batch in c.watch(incarnation=mirror.incarnation, from_revision=mirror.revision):
                for item in batch:
                    mirror.apply(item)  # asserts contiguous revisions and apps before allocations
                if stop.is_set() and isinstance(batch[-1], Marker) and not batch[-1].initial_sync_end:
                    return

        async def sample() -> None:
            while not stop.is_set():
                snap = await sampler.get_snapshot()
                assert await until(lambda s=snap: mirror.revision >= s.revision, 5), "not reached in time"
                assert mirror.state_at(snap.revision) == Mirror.of(snap), (
                    f"differs at revision {snap.revision}"
                )
                checked.add(snap.revision)

        async def late_joiner() -> None:  # a second watcher that starts mid-churn with send_initial
            await asyncio.sleep(0.8)
            items: list[object] = []
            stream = sampler.watch(send_initial=True)
            async for batch in stream:
                items += batch
                if isinstance(batch[-1], Marker):
                    break
            await stream.aclose()
            end = items[-1]
            assert isinstance(end, Marker) and end.initial_sync_end
            assert await until(lambda: mirror.revision >= end.revision, 5), "condition not reached in time"
            node, apps, allocs = mirror.state_at(end.revision)
            got = items[:-1]
            assert got[0].obj == node  # type: ignore[attr-defined]
            assert tuple(i.obj for i in got[1 : 1 + len(apps)]) == apps  # type: ignore[attr-defined]
            assert tuple(i.obj for i in got[1 + len(apps) :]) == allocs  # type: ignore[attr-defined]

        tasks = [
            asyncio.create_task(watch()),
            asyncio.create_task(sample()),
            asyncio.create_task(late_joiner()),
        ]
        # 2.5 s, and on until the churn did what the test needs (a busy machine runs fewer rounds a second)
        stats = await _timed_churn(agent, c, stop, 2.5, lambda n: (
            mirror.revision > 200 and n["created"] > 50 and n["admitted"] > 5 and len(checked) >= 30))
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        final = await sampler.get_snapshot()
        assert await until(lambda: mirror.revision >= final.revision, 5), "condition not reached in time"
        assert mirror.state_at(final.revision) == Mirror.of(final)
    assert len(checked) >= 30, (f"only {len(checked)} distinct revisions compared", mirror.revision, stats)
    assert mirror.revision > 200 and stats["created"] > 50 and stats["admitted"] > 5, (mirror.revision, stats)
    assert {a.key for a in final.allocations} >= agent.containers()


async def _timed_churn(agent: Agent, c: AgentClient, stop: asyncio.Event, seconds: float,
                      enough: Callable[[dict[str, int]], bool] = lambda n: True,
                      most: float = 30.0) -> dict[str, int]:
    """Churn for `seconds`, then on until `enough(counts)` (at most `most` seconds in all)."""
    n: dict[str, int] = {}
    task = asyncio.create_task(churn(agent, c, stop, random.Random(7), n))
    await asyncio.sleep(seconds)
    end = time.monotonic() + most - seconds
    while not enough(n) and time.monotonic() < end and not task.done():
        await asyncio.sleep(0.1)
    stop.set()
    return await task


async def test_resume_after_a_dropped_stream_loses_nothing(make_agent: Factory) -> None:
    agent = make_agent("node-resume", {"loop.interval_s": 0.05})
    async with AgentClient(agent.address) as c:
        view = await ack(c)
        mirror = Mirror(view)
        stop = asyncio.Event()
        churner = asyncio.create_task(churn(agent, c, stop, random.Random(3)))
        drops = 0
        for _ in range(6):  # watch a while, drop the stream, let changes pile up, resume
            stream = c.watch(incarnation=mirror.incarnation, from_revision=mirror.revision)
            end = asyncio.get_running_loop().time() + 0.2
            async for batch in stream:
                for item in batch:
                    mirror.apply(item)
                if asyncio.get_running_loop().time() > end:
                    break
            await stream.aclose()
            drops += 1
            await asyncio.sleep(0.15)
        stop.set()
        await churner
        await asyncio.sleep(0.1)
        stream = c.watch(incarnation=mirror.incarnation, from_revision=mirror.revision)
        async for batch in stream:
            for item in batch:
                mirror.apply(item)
            if isinstance(batch[-1], Marker) and batch[-1].initial_sync_end:
                break
        await stream.aclose()
        final = await c.get_snapshot()
        assert final.revision == mirror.revision
        assert mirror.state_at(final.revision) == Mirror.of(final)
        assert drops == 6 and mirror.revision > 50


async def test_ring_overflow_gives_out_of_range_and_a_resnapshot_recovers(make_agent: Factory) -> None:
    agent = make_agent("node-ring", {"state.ring_size": 32, "loop.interval_s": 0.05})
    async with AgentClient(agent.address) as c:
        first = await c.get_snapshot()
        for s in range(1, 41):
            agent.add_container(1, s)

        async def all_seen() -> bool:
            return len((await c.get_snapshot()).allocations) == 40

        assert await until(all_seen, 5), "condition not reached in time"
        view = await c.get_snapshot()
        assert len(view.allocations) == 40 and view.oldest_watchable_revision > first.revision
        with pytest.raises(AgentCallError) as err:
            await anext(c.watch(incarnation=view.identity.incarnation, from_revision=first.revision))
        assert err.value.code is grpc.StatusCode.OUT_OF_RANGE and err.value.reason == "revision_gone"
    rec = Recovery([agent.address], RecoveryConfig(epoch=3))
    await rec.start()
    try:
        assert await rec.wait_running() is SchedulerState.RUNNING
        assert len(rec.cluster.nodes[agent.address].allocations) == 40
    finally:
        await rec.stop()


async def test_agent_restart_gives_a_new_incarnation_and_the_client_resnapshots(make_agent: Factory) -> None:
    agent = make_agent("node-restart")
    agent.add_container(1, 1)
    rec = Recovery([agent.address], RecoveryConfig(epoch=4, lost_after_s=10, retry_max_s=0.1))
    await rec.start()
    try:
        assert await rec.wait_running() is SchedulerState.RUNNING
        nc = rec.cluster.nodes[agent.address]
        first = nc.incarnation
        async with AgentClient(agent.address) as c:
            r = await c.admit(req(2, 1, cpu=300), 4)
            assert r.accepted
        await rec.wait_for(lambda cl: f"yarn/{cid(2, 1)}" in cl.nodes[agent.address].allocations, 5)
        agent.kill()  # crash: the pending launch must survive, the stream breaks
        agent.add_container(1, 2)
        await agent.astart()
        assert agent.incarnation != first
        assert await rec.wait_for(
            lambda cl: (
                cl.nodes[agent.address].incarnation == agent.incarnation
                and cl.nodes[agent.address].state is NodeState.RECOVERED
            ),
            10,
        )
        assert nc.snapshots == 2 and nc.recoveries == 2
        keys = {k: a.phase for k, a in nc.allocations.items()}
        assert keys == {
            f"yarn/{cid(1, 1)}": Phase.RUNNING,
            f"yarn/{cid(1, 2)}": Phase.RUNNING,
            f"yarn/{cid(2, 1)}": Phase.PENDING_LAUNCH,
        }
        async with AgentClient(agent.address) as c:
            view = await c.get_snapshot()
        assert view.identity.restarts == 1 and view.node.lifecycle is Lifecycle.SCHEDULABLE
        assert view.node.acked_epoch == 4 and view.node.highest_epoch == 4
    finally:
        await rec.stop()


async def test_epoch_fencing_survives_a_restart(make_agent: Factory) -> None:
    agent = make_agent("node-fence")
    async with AgentClient(agent.address) as c:
        await ack(c, epoch=5)
        assert (await c.admit(req(1, 1), 5)).accepted
        with pytest.raises(AgentCallError) as err:
            await c.admit(req(1, 2), 4)
        assert err.value.code is grpc.StatusCode.FAILED_PRECONDITION and "epoch 5" in err.value.details
    agent.stop()
    await agent.astart()
    async with AgentClient(agent.address) as c:
        with pytest.raises(AgentCallError) as err:
            await ack(c, epoch=4)
        assert err.value.reason == "stale_epoch"
        await ack(c, epoch=6)
        assert (await c.admit(req(1, 2), 6)).accepted
        assert (await c.get_snapshot()).node.highest_epoch == 6


async def test_admit_refuses_when_full_and_is_idempotent(make_agent: Factory) -> None:
    """The batch budget is the agent's own (local formula on a 2-CPU private node, nearly idle)."""
    agent = make_agent("node-full", {"loop.interval_s": 0.05})
    async with AgentClient(agent.address) as c:
        r = await c.admit(req(1, 1, cpu=100), 1)
        assert not r.accepted and r.refusal is Refusal.NOT_SCHEDULABLE
        view = await ack(c)
        budget = view.node.batch_allocatable.milli_cpu
        assert 0 < budget <= 2000
        big = budget - 200
        first = await c.admit(req(1, 1, cpu=big), 1)
        assert first.accepted and 150 <= first.batch_free.milli_cpu <= 250
        full = await c.admit(req(1, 2, cpu=400), 1)
        assert not full.accepted and full.refusal is Refusal.INSUFFICIENT_CPU and "free" in full.message
        again = await c.admit(req(1, 1, cpu=big), 1)
        assert again.accepted and again.already_admitted and again.allocation == first.allocation
        agent.add_container(1, 1)  # the launch starts: still counted once

        async def running() -> bool:
            a = {x.key: x for x in (await c.get_snapshot()).allocations}.get(f"yarn/{cid(1, 1)}")
            return a is not None and a.phase is Phase.RUNNING and a.resources.milli_cpu == big

        assert await until(running, 5), "condition not reached in time"
        assert not (await c.admit(req(1, 2, cpu=400), 1)).accepted
        agent.remove_container(f"yarn/{cid(1, 1)}")  # it ends: the capacity is free again

        async def gone() -> bool:
            return not (await c.get_snapshot()).allocations

        assert await until(gone, 5), "condition not reached in time"
        assert (await c.admit(req(1, 2, cpu=400), 1)).accepted


def test_agent_directory_layout(make_agent: Factory) -> None:
    agent = make_agent("node-layout")
    assert agent.socket.exists() and agent.state.exists()
    agent.stop()
    assert not agent.socket.exists()  # removed on a clean stop
