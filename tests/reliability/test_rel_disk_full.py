"""A state disk that fills while the agent runs: a real `coloc-agent run` with its state directory on a
small tmpfs (mounted here, unmounted on the way out). Filled: `/readyz` turns 503 naming the state file
and the error, and `Admit` answers UNAVAILABLE saying so. Freed: the background writer's retry succeeds,
`/readyz` is 200 again and the same Admit (same request id) is accepted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kit.agentproc import agent_config, get, metric, readyz, running_agent
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.api.client import AgentCallError, AgentClient
from agent.state import AdmitRequest
from qos.model import Resources, Source

pytestmark = [pytest.mark.cgroups, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("mount") is None, reason="mount is not installed")]


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "coloc-test", str(where)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(d: Path) -> Path:
    """Write zeros to `d/fill` until the file system is full."""
    blob = d / "fill"
    fd = os.open(blob, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    return blob


async def admit(sock: str, i: int) -> tuple[str, str]:
    """The Admit's outcome: ("accepted"|"refused"|<status code>, message)."""
    req = AdmitRequest(f"local/batch/disk-{i}", "app-disk", Source.LOCAL, Resources(1, 1 << 20),
                       request_id=f"disk-{i}")
    async with AgentClient(sock) as c:
        try:
            r = await c.admit(req, 1, timeout=10)
        except AgentCallError as err:
            return err.code.name, err.details
    return ("accepted" if r.accepted else "refused"), r.message


def test_a_disk_that_fills_while_running_turns_readyz_red_and_back(real_root: RealRoot,
                                                                     tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    sock = str(tmp_path / "admin.sock")  # Admit: the admin socket, beside agent.sock
    log = tmp_path / "agent.log"
    with small_tmpfs(tmp_path / "state", "256k") as state, running_agent(cfg, log):
        assert wait(lambda: readyz(port)[0] == 200, 30), log.read_text()[-3000:]
        # the batch budget is known after the first ticks; until then an Admit is refused
        assert wait(lambda: asyncio.run(admit(sock, 0))[0] == "accepted", 15), asyncio.run(admit(sock, 0))
        blob = fill(state)
        code, details = asyncio.run(admit(sock, 1))
        assert code == grpc.StatusCode.UNAVAILABLE.name, (code, details)
        assert "No space left on device" in details and "retry" in details, details
        assert wait(lambda: readyz(port)[0] == 503, 10)
        status, body = readyz(port)
        assert status == 503 and "No space left on device" in str(body["reason"]), body
        assert str(state) in str(body["reason"]), body
        assert metric(port, "coloc_ticks_total") > 0  # alive: /healthz stays green, only readiness drops
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        blob.unlink()
        assert wait(lambda: readyz(port)[0] == 200, 10), readyz(port)
        assert asyncio.run(admit(sock, 1))[0] == "accepted"
