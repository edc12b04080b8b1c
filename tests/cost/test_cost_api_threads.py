"""The real agent process serves its API with no thread per connection.

The node API is grpc.aio (issue 24): handlers run on the agent's event loop, HTTP/2 in gRPC core's threads,
whose pool is bounded (gRPC sizes it from the CPU count, 4 to 16). A held Watch and 50 more connected
clients must add no thread per connection. bench/footprint.py measures the wake-ups and the RSS.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from kit.agentproc import agent_config, running_agent
from kit.poll import settled, wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.api.client import AgentClient

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


def thread_names(pid: int) -> list[str]:
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return sorted(names)


async def test_connections_and_a_held_watch_add_no_thread_per_connection(real_root: RealRoot) -> None:
    short = Path(tempfile.mkdtemp(prefix="coloc-thr-", dir="/tmp"))  # unix socket paths ≤ 107 bytes
    try:
        config = agent_config(short, real_root.name, free_port())
        sock = short / "agent.sock"
        with running_agent(config, short / "agent.log") as proc:
            assert wait(sock.exists, 30), (short / "agent.log").read_text()[-3000:]
            async with AgentClient(str(sock)) as c:
                await c.get_snapshot()
            idle = settled(lambda: thread_names(proc.pid), 0.5)  # gRPC core's threads are up
            async with AgentClient(str(sock)) as c:
                stream = c.watch(send_initial=True)
                await anext(stream)
                held = [AgentClient(str(sock)) for _ in range(50)]  # each its own connection
                await asyncio.gather(*(h.get_snapshot() for h in held))
                busy = thread_names(proc.pid)
                assert len(busy) < len(idle) + 10, (idle, busy)  # 51 connections: not a thread each
                await stream.aclose()
                for h in held:
                    await h.close()
            assert proc.poll() is None
            assert len(idle) <= 24, idle  # the loop, the agent's few threads, gRPC core's bounded pool
    finally:
        shutil.rmtree(short, ignore_errors=True)
