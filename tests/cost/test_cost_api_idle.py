"""The real agent process stops its gRPC server when nobody is connected, and its gRPC threads with it.

gRPC core's threads (`event_engine`, `grpc_global_timer`, `lifeguard`) wake ~6 times a second with no call
(docs/performance.md); after `api.idle_stop_s` with no connection the agent has none of them, until a
client connects. bench/footprint.py measures the wake-ups at the default setting (60 s).
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from realcg import RealRoot

from agent.api.client import AgentClient

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

GRPC_THREADS = ("event_engine", "grpc_global_tim", "lifeguard")  # comm is cut at 15 characters
IDLE_S = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def threads(pid: int) -> dict[str, int]:
    """Voluntary context switches (wake-ups) by thread name, summed over threads of the same name."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        switches = next(int(line.split()[1]) for line in status.splitlines()
                        if line.startswith("voluntary_ctxt_switches"))
        out[name] = out.get(name, 0) + switches
    return out


def grpc_threads(pid: int) -> list[str]:
    return [n for n in threads(pid) if n.startswith(GRPC_THREADS)]


async def wakeups(pid: int, seconds: float) -> tuple[float, float]:
    """(all threads', gRPC core's threads') wake-ups per second over `seconds`."""
    a = threads(pid)
    await asyncio.sleep(seconds)
    b = threads(pid)
    total = sum(v - a.get(k, 0) for k, v in b.items()) / seconds
    grpc = sum(v - a.get(k, 0) for k, v in b.items() if k.startswith(GRPC_THREADS)) / seconds
    return total, grpc


async def eventually(pred: object, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.1)
    return False


@contextmanager
def agent(tmp: Path, root: str) -> Iterator[subprocess.Popen[bytes]]:
    sock = tmp / "agent.sock"
    cfg = {
        "node": {"name": "idle-node", "cpus": 2, "memory": "1Gi", "scope": "cgroup-root"},
        "cgroups": {"root": root, "setup_tiers": True, "cleanup_on_exit": True},
        "eviction": {"dry_run": True},
        "metrics": {"bind": "127.0.0.1", "port": _free_port()},
        "state": {"path": str(tmp / "state.json")},
        "api": {"socket_path": str(sock), "idle_stop_s": IDLE_S},
        "log": {"format": "json"},
    }
    config = tmp / "agent.yaml"
    config.write_text(yaml.safe_dump(cfg))
    with (tmp / "agent.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--config", str(config)],
                                stdout=log, stderr=log)
    try:
        end = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        assert sock.exists(), (tmp / "agent.log").read_text()[-3000:]
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def test_an_idle_agent_has_no_grpc_threads_and_a_watch_brings_them_back(real_root: RealRoot) -> None:
    short = Path(tempfile.mkdtemp(prefix="coloc-idle-", dir="/tmp"))  # unix socket paths ≤ 107 bytes
    try:
        with agent(short, real_root.name) as proc:
            # Started and stopped at start-up (so a bad setting fails the start): nobody is connected.
            assert await eventually(lambda: not grpc_threads(proc.pid)), threads(proc.pid)
            idle_total, idle_grpc = await wakeups(proc.pid, 3.0)
            assert idle_grpc == 0 and not grpc_threads(proc.pid)

            async with AgentClient(str(short / "agent.sock")) as c:
                stream = c.watch(send_initial=True)
                await anext(stream)
                running = grpc_threads(proc.pid)
                assert set(running) >= set(GRPC_THREADS), running
                await asyncio.sleep(IDLE_S * 2)  # the open Watch keeps the server past idle_stop_s
                busy_total, busy_grpc = await wakeups(proc.pid, 3.0)
                assert grpc_threads(proc.pid), "the server stopped under an open Watch"
                assert (await c.get_snapshot()).revision >= 0
                await stream.aclose()
            del stream
            gc.collect()  # the closed channel keeps its connection while the stream's call object lives
            assert busy_grpc > idle_grpc and busy_total > idle_total, (idle_total, busy_total, busy_grpc)
            assert await eventually(lambda: not grpc_threads(proc.pid)), threads(proc.pid)
            assert proc.poll() is None
    finally:
        shutil.rmtree(short, ignore_errors=True)
