"""The real agent process serves its API with no thread of its own and never loads gRPC core.

grpc core's threads (`event_engine`, `grpc_global_timer`, `lifeguard`) woke 13-15 times a second while a
client held a connection, which broke the agent's wake-up budget (docs/performance.md). The node API is now
grpclib on the agent's event loop: a held Watch adds no thread and maps no gRPC core library.
bench/footprint.py measures the wake-ups and the RSS.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from agentproc import agent_config, free_port, running_agent, wait
from realcg import RealRoot

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


def maps_grpc_core(pid: int) -> bool:
    return "cygrpc" in Path(f"/proc/{pid}/maps").read_text()


async def test_a_held_watch_adds_no_thread_and_no_grpc_core(real_root: RealRoot) -> None:
    short = Path(tempfile.mkdtemp(prefix="coloc-thr-", dir="/tmp"))  # unix socket paths ≤ 107 bytes
    try:
        config = agent_config(short, real_root.name, free_port())
        sock = short / "agent.sock"
        with running_agent(config, short / "agent.log") as proc:
            assert wait(sock.exists, 30), (short / "agent.log").read_text()[-3000:]
            async with AgentClient(str(sock)) as c:
                await c.get_snapshot()
            await asyncio.sleep(0.5)
            idle = thread_names(proc.pid)
            async with AgentClient(str(sock)) as c:
                stream = c.watch(send_initial=True)
                await anext(stream)
                held = [AgentClient(str(sock)) for _ in range(5)]
                for h in held:
                    await h.get_snapshot()
                assert thread_names(proc.pid) == idle, (idle, thread_names(proc.pid))
                assert not maps_grpc_core(proc.pid)
                await stream.aclose()
                for h in held:
                    await h.close()
            assert not any(n.startswith(("event_engine", "grpc_global_tim", "lifeguard")) for n in idle), idle
            assert proc.poll() is None
    finally:
        shutil.rmtree(short, ignore_errors=True)
