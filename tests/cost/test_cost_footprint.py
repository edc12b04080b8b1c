"""The agent's own footprint (issue 17): what the run path imports, and how often a calm loop wakes.

`bench/footprint.py` measures the real process; these guard the two causes it found that code can undo:
an eager import of what the default config does not use (pyroute2 is ~190 modules, ~9 MB of RSS; the
Kubernetes API client's modules and urllib3 about 1.3 MB), and
fast-path polls that do not share the tick's wake-up.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kit.poll import until
from kit.realcg import RealRoot

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.daemon.runtime import build

REPO = Path(__file__).resolve().parents[2]
# The egress shaper's stack, and the Kubernetes API client's (urllib3 and our modules that use it).
LAZY = ("pyroute2", "agent.executors.htb", "kubernetes", "urllib3", "agent.sources.nodeslo",
        "agent.reporting.nodemetric", "agent.reporting.node_annotations", "agent.executors.k8s_eviction")


def _config(root: str, **loop: float) -> AgentConfig:
    return AgentConfig(
        node=NodeConfig(name="test-node", cpus=2, memory="1Gi", scope="cgroup-root"),
        cgroups=CgroupConfig(root=root, setup_tiers=True, cleanup_on_exit=True),
        loop=LoopConfig(interval_s=1.0, psi_trigger="", **loop),  # type: ignore[arg-type]
        eviction=EvictionConfig(dry_run=True),
        state=StateConfig(path=""),
    )


def _imported_after(code: str) -> list[str]:
    """Which of LAZY a fresh interpreter has imported after running `code`."""
    probe = code + f"\nimport json, sys\nprint(json.dumps([m for m in {LAZY!r} if m in sys.modules]))\n"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_run_command_imports_neither_the_egress_shaper_nor_the_kubernetes_client() -> None:
    assert _imported_after("import agent.cli.main, agent.cli.run") == []


@pytest.mark.cgroups
def test_a_standalone_runtime_imports_neither_pyroute2_nor_the_api_client(real_root: RealRoot) -> None:
    code = textwrap.dedent(f"""
        from agent.config.agent import AgentConfig, CgroupConfig, NodeConfig, StateConfig
        from agent.daemon.runtime import build
        rt = build(AgentConfig(node=NodeConfig(name="n", cpus=1, memory="1Gi", scope="cgroup-root"),
                               cgroups=CgroupConfig(root={real_root.name + "/node"!r}, setup_tiers=True,
                                                    cleanup_on_exit=True),
                               state=StateConfig(path="")))
        assert rt.network is None
        rt.close()
    """)
    assert _imported_after(code) == []


@pytest.mark.cgroups
@pytest.mark.slow
async def test_calm_polls_fall_between_ticks_and_cost_no_wake_up_of_their_own(real_root: RealRoot) -> None:
    """interval 1 s, calm poll 0.5 s: one poll midway between two ticks, none at a tick or just after one."""
    rt = build(_config(real_root.name, calm_poll_s=0.5, fast_hold_s=0.0))
    ticks: list[float] = []
    polls: list[float] = []
    tick, poll = rt.loop.tick, rt.collector.poll_tiers

    def timed_tick(cause: str = "interval") -> object:
        ticks.append(time.monotonic())
        return tick(cause)

    def timed_poll(window_s: float) -> tuple[float, float] | None:
        polls.append(time.monotonic())
        return poll(window_s)

    rt.loop.tick = timed_tick  # type: ignore[method-assign,assignment]
    rt.collector.poll_tiers = timed_poll  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(rt.loop.run(stop))
    try:  # four calm ticks (three intervals to look between)
        await until(lambda: bool(ticks) and len([t for t in ticks if t > ticks[0] + 2.5]) >= 4, 15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await rt.executor.drain(5)
        rt.close()
    calm = [t for t in ticks if t > ticks[0] + 2.5]  # past start-up's fast polls (no rates yet)
    assert len(calm) >= 3, ticks
    for a, b in itertools.pairwise(calm):
        between = [p for p in polls if a < p < b]
        assert len(between) == 1, (a, b, between)
        assert 0.3 < between[0] - a < 0.7, "the poll is not midway between the ticks"
    near = [p for p in polls if p > calm[0] and min(abs(p - t) for t in ticks) < 0.05]
    assert near == [], "a poll woke the loop at (or just after) a tick"
