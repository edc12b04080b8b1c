"""The agent's cgroup root on real cgroups, with real `coloc-agent run` processes: a root left by a
SIGKILL is still removed on the next clean exit; a root the agent did not make is never removed; a start
that fails after the tiers were laid out removes them again and exits 2 with one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agentproc import agent_config, free_port, metric, running_agent, wait
from realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

TIERS = ("burstable", "besteffort")


def _left(real_root: RealRoot, rel: str) -> list[Path]:
    return [d for d in real_root.dirs(rel) if d.exists()]


def _ticking(port: int, log: Path) -> None:
    assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), log.read_text()[-3000:]


def test_a_root_left_by_a_crash_is_removed_on_the_next_clean_exit(real_root: RealRoot,
                                                                   tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    log = tmp_path / "agent.log"
    with running_agent(cfg, log) as proc:
        _ticking(port, log)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert _left(real_root, "agent"), "the killed agent's root should still be there"
    with running_agent(cfg, log) as proc:
        _ticking(port, log)
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    assert not _left(real_root, "agent"), "a root the agent made was left after a clean exit"
    assert not (tmp_path / "state" / "state.json.root").exists()


def test_a_root_the_agent_did_not_make_is_kept(real_root: RealRoot, tmp_path: Path) -> None:
    """As the kubelet's kubepods: there before the agent; only what the agent made below it may go."""
    real_root.mkcg("agent")
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    log = tmp_path / "agent.log"
    for kill in (True, False):  # a crash in between must not make it the agent's either
        with running_agent(cfg, log) as proc:
            _ticking(port, log)
            if kill:
                proc.send_signal(signal.SIGKILL)
            else:
                proc.terminate()
            proc.wait(timeout=30)
    assert _left(real_root, "agent")
    assert not (tmp_path / "state" / "state.json.root").exists()


def _start(cfg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, check=False)


def _one_line(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("coloc-agent:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_a_start_that_fails_after_setup_tiers_removes_the_root(real_root: RealRoot, tmp_path: Path) -> None:
    """The audit log's path is a directory: AuditLog fails after setup_tiers made the root and tiers."""
    audit = tmp_path / "audit-dir"
    audit.mkdir()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", free_port(), audit={"path": str(audit)})
    _one_line(_start(cfg), str(audit))
    assert not _left(real_root, "agent"), "a failed start left the cgroup root behind"
    assert not (tmp_path / "state" / "state.json.root").exists()


def test_a_failed_start_in_a_foreign_root_removes_only_its_tiers(real_root: RealRoot, tmp_path: Path) -> None:
    real_root.mkcg("agent")
    audit = tmp_path / "audit-dir"
    audit.mkdir()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", free_port(), audit={"path": str(audit)})
    _one_line(_start(cfg), str(audit))
    assert _left(real_root, "agent")
    assert not any(_left(real_root, f"agent/{t}") for t in TIERS), "the tiers made were left behind"
