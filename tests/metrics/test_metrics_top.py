"""`coloc-agent top --once` against a live /metrics endpoint served over real HTTP, and against the agent's
real gRPC API server (agent.api) on a unix socket, serving a real ledger."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from nodes import GiB, publication, small_node

from agent.cli.top import main
from agent.metrics import LedgerFigures
from agent.published import ActionRecord, Board
from qos.model import Resources


def test_top_once_renders_tiers_budget_ledger_and_actions(serve, capsys) -> None:
    board = Board()
    now = time.time()
    pub = publication(
        actions=(
            ActionRecord(now - 30, "suppression", "SetBeCpuset", "besteffort", "applied", "hp busy"),
            ActionRecord(now - 5, "memory_eviction", "Evict", "k8s/abc", "failed", "memory_pressure"),
        )
    )
    board.publish(pub)
    ledger = LedgerFigures(
        revision=77,
        lifecycle="decommissioning",
        drain_deadline=now + 120,
        batch_origin=Resources(3000, 4 * GiB),
    )
    hub, server = serve(board, ledger_view=lambda: ledger)
    hub.observe(pub)

    assert main(["--url", server.url, "--once", "--socket", "none"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "ticks 7" in lines[0] and "synced" in lines[0]
    assert "lifecycle decommissioning" in out and "ledger rev 77" in out and "drain deadline in 1" in out
    besteffort = next(line for line in lines if line.startswith("besteffort"))
    assert besteffort.split() == ["besteffort", "3", "0.75", "3.50", "896.0Mi", "3.5Gi"]
    assert "policy cpuset  granted 1.00 cores  floor 1.00  cpuset 1 cpus" in out
    assert "origin 3.00 cores / 4.0Gi  k8s 1.50 / 1.5Gi  yarn 2.00 / 2.0Gi  overcommit 0.50 / 0B" in out
    assert "yarn 12.5s STALE" in out
    assert "evictions  memory_pressure/k8s 3" in out
    # recent actions: latest first
    actions = [line for line in lines if line.endswith((" applied  1", " failed   1"))]
    assert [a.split()[2:4] for a in actions] == [["memory_eviction", "Evict"], ["suppression", "SetBeCpuset"]]
    # the heaviest workload first
    header = lines.index(next(line for line in lines if line.startswith("NAMESPACE")))
    assert lines[header + 1].split() == ["team-a", "pod-1", "k8s", "guaranteed", "1.50"]


def test_top_once_fails_clearly_when_the_agent_is_not_there(capsys) -> None:
    assert main(["--url", "http://127.0.0.1:9/", "--once", "--timeout", "2", "--socket", "none"]) == 1
    assert capsys.readouterr().err == (
        "coloc-agent top: no agent answers at http://127.0.0.1:9/metrics (connection refused); point at one "
        "with --url URL, --socket PATH or --config FILE (the agent's config)\n")


def test_top_rejects_a_bad_interval(capsys) -> None:
    assert main(["--interval", "0"]) == 2
    assert "--interval" in capsys.readouterr().err


def test_top_says_when_the_socket_is_not_there(serve, capsys, tmp_path) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board)
    missing = tmp_path / "agent.sock"
    assert main(["--url", server.url, "--once", "--socket", str(missing)]) == 0
    out = capsys.readouterr().out
    assert f"api: socket {missing} is not there; node and ledger figures from /metrics only" in out
    assert "lifecycle -" in out


class ApiThread:
    """The agent's real gRPC server (agent.api.server) on its own event loop in a thread."""

    def __init__(self, ledger, socket_path: str, board: Board) -> None:
        self.ledger, self.socket_path, self.board = ledger, socket_path, board
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.server = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from agent.api.server import start_api_server
        from agent.config.api import ApiConfig

        asyncio.set_event_loop(self.loop)
        cfg = ApiConfig(socket_path=self.socket_path)
        self.server = self.loop.run_until_complete(start_api_server(self.ledger, cfg, board=self.board))
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> ApiThread:
        self.thread.start()
        assert self.ready.wait(10), "api server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_top_reads_node_ledger_and_actions_over_grpc(serve, capsys) -> None:
    pytest.importorskip("agent.api.server")
    from agent.state.ledger import Ledger, LedgerConfig

    ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None), boot_id="boot-1")
    ledger.sync(small_node(), Resources(3000, 4 * GiB), time.time())
    ledger.ack_recovery(1, ledger.revision)
    board = Board()
    now = time.time()
    board.publish(
        publication(
            actions=(
                ActionRecord(now - 2, "memory_eviction", "Evict", "k8s/abc", "applied", "memory_pressure"),
            )
        )
    )
    _, server = serve(board, ledger_view=lambda: ledger.last_view)
    sock_dir = tempfile.mkdtemp(prefix="coloc-top-", dir="/tmp")
    try:
        with ApiThread(ledger, os.path.join(sock_dir, "agent.sock"), board) as api:
            assert main(["--url", server.url, "--once", "--socket", api.socket_path]) == 0
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    out = capsys.readouterr().out
    assert f"node node-a  lifecycle schedulable  ledger rev {ledger.revision}" in out
    assert "ledger     allocatable 3.00 cores / 4.0Gi  allocated 3.50 / 3.5Gi" in out
    assert "k8s/running 2" in out and "yarn/running 1" in out
    row = next(line for line in out.splitlines() if "k8s/abc" in line)
    assert row.split()[2:] == ["memory_eviction", "Evict", "k8s/abc", "applied", "memory_pressure"]
    assert "api:" not in out


def test_coloc_agent_top_runs_through_the_cli(serve) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "top", "--url", server.url, "--once", "--socket", "none"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ticks 7" in proc.stdout and "besteffort  3" in proc.stdout
