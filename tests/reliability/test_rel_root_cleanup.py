"""The agent's cgroup root on real cgroups, with real `coloc-agent run` processes: a root left by a
SIGKILL is still removed on the next clean exit; a root the agent did not make is never removed; a start
that fails after the tiers were laid out removes them again and exits 2 with one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kit.agentproc import agent_config, metric, running_agent
from kit.holdings import marks, rewrite
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

TIERS = ("burstable", "besteffort")


def _left(real_root: RealRoot, rel: str) -> list[Path]:
    return [d for d in real_root.dirs(rel) if d.exists()]


def _ticking(port: int, log: Path) -> None:
    assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), log.read_text()[-3000:]


def _run_then(cfg: Path, port: int, log: Path, sig: signal.Signals) -> None:
    """Run the agent until it ticks, then end it with `sig`: SIGKILL is a crash, SIGTERM a clean exit."""
    with running_agent(cfg, log) as proc:
        _ticking(port, log)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    assert sig is signal.SIGKILL or code == 0, log.read_text()[-3000:]


def test_a_root_left_by_a_crash_is_removed_on_the_next_clean_exit(real_root: RealRoot,
                                                                   tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    log = tmp_path / "agent.log"
    _run_then(cfg, port, log, signal.SIGKILL)
    assert _left(real_root, "agent"), "the killed agent's root should still be there"
    _run_then(cfg, port, log, signal.SIGTERM)
    assert not _left(real_root, "agent"), "a root the agent made was left after a clean exit"
    assert "root" not in marks(tmp_path / "state" / "state.json.held")


def test_a_marker_from_another_boot_or_directory_does_not_make_a_root_the_agents(real_root: RealRoot,
                                                                                 tmp_path: Path) -> None:
    """After a reboot (the state directory survives, cgroups do not) someone may make a root of the same
    name before the agent starts: the marker's boot id or inode no longer matches, so the root is kept."""
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    log = tmp_path / "agent.log"
    journal = tmp_path / "state" / "state.json.held"
    _run_then(cfg, port, log, signal.SIGKILL)
    recorded = marks(journal)["root"]
    assert recorded["inode"], recorded
    _run_then(cfg, port, log, signal.SIGKILL)  # a restart claims it again (and is killed again)
    rewrite(journal, root={**recorded, "inode": recorded["inode"] + 1})
    _run_then(cfg, port, log, signal.SIGTERM)
    assert _left(real_root, "agent"), "a root whose mark's inode differs was removed"
    _run_then(cfg, port, log, signal.SIGKILL)
    rewrite(journal, boot_id="00000000-0000-4000-8000-000000000000", root=recorded)
    _run_then(cfg, port, log, signal.SIGTERM)
    assert _left(real_root, "agent"), "a root marked in another boot was removed"


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
    assert "root" not in marks(tmp_path / "state" / "state.json.held")


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
    assert "root" not in marks(tmp_path / "state" / "state.json.held")


def test_a_failed_start_in_a_foreign_root_removes_only_its_tiers(real_root: RealRoot, tmp_path: Path) -> None:
    real_root.mkcg("agent")
    audit = tmp_path / "audit-dir"
    audit.mkdir()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", free_port(), audit={"path": str(audit)})
    _one_line(_start(cfg), str(audit))
    assert _left(real_root, "agent")
    assert not any(_left(real_root, f"agent/{t}") for t in TIERS), "the tiers made were left behind"


def test_a_failed_restart_after_a_crash_keeps_the_work_that_survived_it(real_root: RealRoot,
                                                                        tmp_path: Path) -> None:
    """The root is the agent's (its marker), but this start did not make it: a crash loop of failed starts
    must not kill the BE work that outlived the crash at every attempt. A clean exit still removes it."""
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    log = tmp_path / "agent.log"
    _run_then(cfg, port, log, signal.SIGKILL)
    be = real_root.spawn("agent/besteffort", ["sleep", "300"])
    audit = tmp_path / "audit-dir"
    audit.mkdir()
    failing = agent_config(tmp_path, f"{real_root.name}/agent", port, audit={"path": str(audit)})
    _one_line(_start(failing), str(audit))
    assert be.poll() is None, "a failed start killed BE work in a root it did not make"
    assert _left(real_root, "agent/besteffort")
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    _run_then(cfg, port, log, signal.SIGTERM)
    assert not _left(real_root, "agent"), "the agent's own root was left after a clean exit"
