"""The metrics server under a flood: a real `coloc-agent run` process on a private cgroup root (real
cgroups), real TCP connections from this process. 3,000 connections that never send a request must not stop
the loop nor `/healthz`, nor make the server's threads unbounded; 50 scrapers at once are answered while the
loop ticks on. The figures (cadence, the time to take the connections, the tick's cost under the scrapers)
are bench/metrics_flood.py's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kit.agentproc import agent_config, get, metric, proc_status, running_agent, scraping
from kit.poll import wait
from kit.ports import free_port, open_idle, raise_fd_limit
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


@pytest.mark.timing  # /healthz must answer within 2 s all along: not beside another worker's load
def test_3000_idle_connections_keep_the_tick_and_healthz(real_root: RealRoot, tmp_path: Path) -> None:
    raise_fd_limit(4000)
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    with running_agent(cfg, tmp_path / "agent.log") as proc:
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30), (tmp_path / "agent.log").read_text()
        ticks0 = metric(port, "coloc_ticks_total")
        socks = open_idle(port, 3000)
        healthz: list[int] = []
        try:
            end = time.monotonic() + 10
            while time.monotonic() < end:
                try:
                    healthz.append(get(f"http://127.0.0.1:{port}/healthz", timeout=2)[0])
                except OSError:
                    healthz.append(0)
                time.sleep(0.5)
            ticks1 = metric(port, "coloc_ticks_total", timeout=5)
            threads = int(proc_status(proc.pid, "Threads"))
        finally:
            for s in socks:
                s.close()
        assert proc.poll() is None
    assert ticks1 > ticks0, "the loop stopped under the idle connections"
    assert healthz and all(code == 200 for code in healthz), healthz
    assert threads <= 64, f"{threads} threads: concurrency is not bounded"


def test_50_concurrent_scrapers_are_answered_while_the_loop_ticks(real_root: RealRoot,
                                                                   tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    with running_agent(cfg, tmp_path / "agent.log"):
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30), (tmp_path / "agent.log").read_text()
        with scraping(port, 50) as answered:
            count = "coloc_tick_duration_seconds_count"
            c0 = metric(port, count)
            assert wait(lambda: metric(port, count) > c0 + 3 and sum(answered) > 50, 20), (c0, sum(answered))
