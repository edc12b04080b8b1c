"""Graceful decommission end to end: the real agent process (`coloc-agent run`) on a private real cgroup
root, real BE processes in `besteffort/<name>` cgroups, the real CLI and a real Watch stream over the
agent's unix socket; SIGKILL and restart of the agent."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import AgentProcess, agent_argv, agent_config
from kit.poll import wait
from kit.realcg import RealRoot

from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.state.records import Event, EventType, NodeRecord, Notice

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


def _config(tmp_path: Path, root: str) -> Path:
    return agent_config(
        tmp_path, root, None, node={"name": "drain-node", "cpus": 2},
        cgroups={"cleanup_on_exit": None}, loop={"interval_s": 0.25, "fast_path": None},
        eviction={"grace_period_s": 1, "rate_per_minute": 600, "burst": 10},
        state={"path": str(tmp_path / "state.json")})


class Agent:
    """The agent process; `start` again after `kill` is a restart on the same state file and socket."""

    def __init__(self, tmp_path: Path, root: str) -> None:
        self.process = AgentProcess(_config(tmp_path, root), tmp_path / "agent.log")
        self.sock = str(tmp_path / "admin.sock")  # drains and acks: the admin socket (beside agent.sock)

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            Path(self.sock).unlink()
        self.process.start()
        assert wait(Path(self.sock).exists, 20), self.log()

    def log(self) -> str:
        return self.process.log(1 << 30)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop(15)

    def call(self, fn: Callable[[AgentClient], Any]) -> Any:
        async def go() -> Any:
            async with AgentClient(self.sock) as c:
                return await fn(c)
        return asyncio.run(go())

    def status(self) -> pb.Status:
        st: pb.Status = self.call(lambda c: c.status(recent=0))
        return st

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(agent_argv(*args, "--socket", self.sock),
                              check=False, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def agent(real_root: RealRoot, tmp_path: Path) -> Any:
    a = Agent(tmp_path, real_root.name)
    yield a
    a.stop()


def _allocations(a: Agent) -> int:
    return sum(p.count for p in a.status().allocations)


class Watcher:
    """A Watch stream read in a thread with its own event loop, collecting every event."""

    def __init__(self, sock: str) -> None:
        import threading
        self.events: list[Event] = []
        self._stop = False
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(sock)), daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    async def _run(self, sock: str) -> None:
        async with AgentClient(sock) as c:
            async for batch in c.watch(send_initial=True):
                self._ready.set()
                self.events += [e for e in batch if isinstance(e, Event)]
                if self._stop:
                    return

    def notices(self, kind: str) -> list[Notice]:
        return [e.obj for e in self.events
                if e.type is EventType.NOTICE and isinstance(e.obj, Notice) and e.obj.kind == kind]

    def nodes(self, reason: str) -> list[NodeRecord]:
        return [e.obj for e in self.events if isinstance(e.obj, NodeRecord) and e.reason == reason]

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)


def test_graceful_drain_lets_short_work_finish_evicts_the_rest_at_the_deadline_then_recommission(
        agent: Agent, real_root: RealRoot) -> None:
    agent.start()
    st = agent.status()
    agent.call(lambda c: c.ack_recovery(1, st.identity.incarnation, st.revision))
    for name in ("short", "mid", "long"):
        real_root.mkcg(f"besteffort/{name}")
    t0 = time.time()
    procs = {"short": real_root.spawn("besteffort/short", ["sleep", "2"]),
             "mid": real_root.spawn("besteffort/mid", ["sleep", "4"]),
             "long": real_root.spawn("besteffort/long", ["sleep", "60"])}
    assert wait(lambda: _allocations(agent) == 3, 10), agent.log()
    allocatable = agent.status().node.batch_allocatable
    assert allocatable.milli_cpu > 0
    watcher = Watcher(agent.sock)
    try:
        timeout = round(t0 + 6 - time.time())  # between the 2nd (t0+4) and the 3rd (t0+60) ending
        assert timeout >= 4
        done = agent.cli("decommission", "--graceful", "--timeout", str(timeout), "--wait")
        assert done.returncode == 0, done.stdout + done.stderr + agent.log()
        ended = time.time()
        st = agent.status()
        deadline = st.node.drain.deadline_unix_ms / 1000
        assert st.node.lifecycle == pb.LIFECYCLE_DECOMMISSIONED
        assert st.node.drain.phase == pb.DRAIN_PHASE_TIMED_OUT
        assert st.node.batch_allocatable.milli_cpu == 0
        # The first two ended by themselves, the third was evicted at (not before) the deadline.
        assert procs["short"].wait(1) == 0 and procs["mid"].wait(1) == 0
        assert procs["long"].wait(5) < 0, "killed by a signal"
        assert deadline <= ended < deadline + 5
        lines = [ln for ln in done.stdout.splitlines() if "allocation(s) left" in ln]
        assert any("DECOMMISSIONING" in ln and "3 allocation(s) left" in ln for ln in lines), done.stdout
        assert any(" 1 allocation(s) left" in ln for ln in lines), "progress showed the count going down"
        # Watchers heard the notice with the absolute deadline.
        assert wait(lambda: any(dict(n.fields).get("outcome") == "timed_out"
                                 for n in watcher.notices("drain")), 5)
        first = watcher.notices("drain")[0]
        assert dict(first.fields)["deadline_unix_ms"] == str(st.node.drain.deadline_unix_ms)
        assert any(dict(n.fields).get("key") == "local/besteffort/long" for n in watcher.notices("eviction"))

        rc = agent.cli("recommission")
        assert rc.returncode == 0 and "SCHEDULABLE" in rc.stdout, rc.stdout + rc.stderr
        assert wait(lambda: bool(watcher.nodes("recommission")), 5)
        assert watcher.nodes("recommission")[0].batch_allocatable.milli_cpu == allocatable.milli_cpu
        assert agent.status().node.lifecycle == pb.LIFECYCLE_SCHEDULABLE
    finally:
        watcher.close()


def test_sigkill_mid_drain_resumes_with_the_same_deadline_and_a_passed_deadline_evicts_at_start(
        agent: Agent, real_root: RealRoot) -> None:
    agent.start()
    real_root.mkcg("besteffort/long")
    proc = real_root.spawn("besteffort/long", ["sleep", "60"])
    assert wait(lambda: _allocations(agent) == 1, 10), agent.log()
    epoch = 3
    resp: pb.DrainResponse = agent.call(lambda c: c.drain(epoch, graceful=True, timeout_s=4,
                                                          request_id="d-1"))
    deadline_ms = resp.drain.deadline_unix_ms
    assert resp.lifecycle == pb.LIFECYCLE_DECOMMISSIONING and resp.remaining_allocations == 1

    agent.kill()
    agent.start()
    st = agent.status()
    assert st.node.lifecycle == pb.LIFECYCLE_DECOMMISSIONING
    assert st.node.drain.deadline_unix_ms == deadline_ms, "the absolute deadline survived SIGKILL"
    assert st.identity.restarts >= 1
    # The same request again (a retried call) changes nothing.
    again: pb.DrainResponse = agent.call(lambda c: c.drain(epoch, graceful=True, timeout_s=100,
                                                           request_id="d-1"))
    assert again.drain.deadline_unix_ms == deadline_ms

    agent.kill()
    assert wait(lambda: time.time() > deadline_ms / 1000 + 1, 10)
    assert proc.poll() is None, "nobody evicted while the agent was down"
    started = time.time()
    agent.start()
    assert proc.wait(10) < 0, "the passed deadline was acted on at start"
    assert time.time() - started < 8
    assert wait(lambda: agent.status().node.lifecycle == pb.LIFECYCLE_DECOMMISSIONED, 10), agent.log()
    assert agent.status().node.drain.phase == pb.DRAIN_PHASE_TIMED_OUT
