"""BE CPU suppression a killed agent left on the tier, with real `coloc-agent run` processes on real v1
cgroups: the next run, with suppression off, releases the tier at its first tick; a clean exit leaves no
holding in the journal; a run that finds no holding of a run that suppressed writes nothing to the tier."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kit.agentproc import agent_config, metric, running_agent
from kit.holdings import held as journal_held
from kit.poll import holds, wait
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


def _quota(real_root: RealRoot) -> int:
    return int((real_root.path("cpu", "agent/besteffort") / "cpu.cfs_quota_us").read_text())


def test_suppression_a_killed_agent_left_is_released_by_a_run_with_suppression_off(
        real_root: RealRoot, tmp_path: Path) -> None:
    port = free_port()

    def config(**suppression: object) -> Path:
        return agent_config(tmp_path, f"{real_root.name}/agent", port, node={"cpus": 2},
                            cgroups={"cleanup_on_exit": False},
                            policies={"suppression": {"policy": "cfsQuota", **suppression}})

    log = tmp_path / "agent.log"
    journal = tmp_path / "state" / "state.json.held"
    with running_agent(config(), log) as agent:
        tier = real_root.path("cpu", "agent/besteffort")
        assert wait(lambda: tier.is_dir() and _quota(real_root) > 0, 30), log.read_text()[-3000:]
        assert journal_held(journal)[("cpu_quota", "besteffort")] == "be_cpu_suppression"
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
    held = _quota(real_root)
    assert held > 0, "the quota went with the agent"
    # suppression turned off while the agent was down: the next run releases what the killed one left
    with running_agent(config(enabled=False), log) as again:
        assert wait(lambda: _quota(real_root) == -1, 30), log.read_text()[-3000:]
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30)
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=30) == 0, log.read_text()[-3000:]
    assert "what an earlier run held is given back" in log.read_text()
    assert "be_cpu_suppression" not in journal_held(journal).values(), "a clean exit left the holding"
    # a run with suppression off and no mark of a run that suppressed writes nothing to the tier
    (real_root.path("cpu", "agent/besteffort") / "cpu.cfs_quota_us").write_text("50000")  # someone else's
    with running_agent(config(enabled=False), log):
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), log.read_text()[-3000:]
        assert holds(lambda: _quota(real_root) == 50_000, 1.5), "a quota the agent never set was lifted"


def test_a_run_that_suppresses_too_keeps_what_the_killed_one_left_until_it_decides(
        real_root: RealRoot, tmp_path: Path) -> None:
    """The next run suppresses as well: its first ticks have no CPU rates to decide on, and what the killed
    run left on the tier stays until it has decided (review, confirmed before: the quota was lifted to -1 at
    the first fresh tick, BE ran unsuppressed for a tick)."""
    port = free_port()
    config = agent_config(tmp_path, f"{real_root.name}/agent", port, node={"cpus": 2},
                          cgroups={"cleanup_on_exit": False},
                          policies={"suppression": {"policy": "cfsQuota"}})
    log = tmp_path / "agent.log"
    with running_agent(config, log) as agent:
        tier = real_root.path("cpu", "agent/besteffort")
        assert wait(lambda: tier.is_dir() and _quota(real_root) > 0, 30), log.read_text()[-3000:]
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
    seen: list[int] = []
    with running_agent(config, log):
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            seen.append(_quota(real_root))
            time.sleep(0.02)
        assert metric(port, "coloc_ticks_total") >= 4, log.read_text()[-3000:]
    assert -1 not in seen, f"the quota was lifted for {seen.count(-1)} of {len(seen)} looks"
