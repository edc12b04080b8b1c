"""The demo is never silent for long: its live view prints a progress line every second (every 3 s with
--quiet) carrying the elapsed time, HP throughput, HP's wake-up p99 and the BE budget, from a thread of its
own, so it keeps that cadence while the demo's own thread is blocked or busy; a BE process that cannot get
to its exec does not hold up the event loop (the agent's); and the demo's process can step into the agent's
pod cgroup and back out again."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kit.realcg import RealRoot

from agent.config.agent import CgroupConfig
from agent.daemon.runtime import BE_TIER, build
from agent.demo.runner import AGENT_POD, HP, Demo, LiveView, demo_config, measure
from agent.demo.spawn import workload_argv

pytestmark = [pytest.mark.cgroups, pytest.mark.xdist_group("cpu"), pytest.mark.slow]

LIVE = re.compile(r"^\s*(\d+\.\d)s\s+(.+?)\s+HP\s+(\d+)/s\s+(\d+)m\s+HP wake-up p99\s+([\d.]+) ms"
                  r"\s+BE budget\s+(-|\d+m)")
QUIET = re.compile(r"^\s*(\d+\.\d)s\s+(.+?): HP (\d+)/s, wake-up p99 ([\d.]+) ms, BE budget (-|\d+m)$")


@pytest.fixture
async def demo(real_root: RealRoot, tmp_path: Path) -> AsyncIterator[Demo]:
    """A demo on the private root with its HP service and probe running, the agent not (yet) started."""
    rt = build(demo_config(real_root.name, "1Gi", 0.5))
    d = Demo(rt, tmp_path)
    try:
        rt.writer.mkdir(HP)
        await d.start_hp("hp", 1)
        d.start("probe", HP, workload_argv("probe", 2, d.probe_file))
        deadline = time.monotonic() + 15
        while (d.hp_count() == 0 or d.probe_offset() == 0) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert d.hp_count() > 0 and d.probe_offset() > 0, "HP service or probe did not start"
        d.t0 = time.monotonic()
        yield d
    finally:
        d.stop_all()
        rt.close()


def _times(lines: list[str], pattern: re.Pattern[str], phase: str) -> list[float]:
    out = []
    for line in lines:
        m = pattern.match(line)
        if m and m.group(2).strip() == phase:
            out.append(float(m.group(1)))
    return out


# The live view is a process of its own writing to the demo's stdout: its lines are captured at the fd.
# It is a Python process: on a busy machine its first line can take seconds, so each test waits for that
# first line (`started`) and judges the cadence from there.


async def started(demo: Demo, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not (demo.samples_file.exists() and demo.samples_file.read_text().count("\n")):
        assert time.monotonic() < deadline, f"the live view printed nothing in {within_s} s"
        await asyncio.sleep(0.05)


async def test_a_live_phase_prints_a_full_progress_line_every_second(
        demo: Demo, capfd: pytest.CaptureFixture[str]) -> None:
    with LiveView.of(demo):
        await started(demo)
        rate = await measure(demo, 4.5, "1 HP alone")
    lines = capfd.readouterr().out.splitlines()
    matched = [m for m in map(LIVE.match, lines) if m]
    assert len(matched) >= 5, f"expected a line per second, got:\n{chr(10).join(lines)}"
    times = [float(m.group(1)) for m in matched]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 1.6, f"a silent stretch of {max(gaps):.1f} s between progress lines: {times}"
    assert all(int(m.group(3)) > 0 for m in matched), "HP throughput missing from a progress line"
    assert all(m.group(6) == "-" for m in matched), "no agent runs: the BE budget must show as '-'"
    assert sum(m.group(2) == "1 HP alone" for m in matched) >= 4, "the phase's name missing from its lines"
    assert rate > 0
    assert demo.p99_ms["1 HP alone"] is not None and demo.p99_ms["1 HP alone"] >= 0
    demo.load_samples()
    assert len(demo.samples) == len(matched) and all(s["hp_units_per_s"] > 0 for s in demo.samples)


async def test_quiet_progress_spans_short_phases_every_three_seconds(
        demo: Demo, capfd: pytest.CaptureFixture[str]) -> None:
    # Like the memory-hog stretch: many 1 s phases in a row. Quiet lines are spaced by the view, not by
    # the phase, so a run of short phases is neither silent nor one line per phase.
    demo.live = False
    with LiveView.of(demo):
        await started(demo)
        start = time.monotonic()
        while time.monotonic() - start < 8.0:
            await measure(demo, 1, "4 memory hog")
    lines = capfd.readouterr().out.splitlines()
    times = _times(lines, QUIET, "4 memory hog")
    assert 2 <= len(times) <= 4, f"quiet mode should print every ~3 s, got:\n{chr(10).join(lines)}"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(2.0 <= g <= 3.6 for g in gaps), f"quiet progress gaps {gaps}"


async def test_the_live_view_keeps_its_cadence_while_the_demo_is_blocked_or_busy(
        demo: Demo, capfd: pytest.CaptureFixture[str]) -> None:
    # What silenced the demo for 107 s on a loaded machine: its one thread waited (the memory hog's spawn
    # waits for a child that must get BE's CPU share before it can exec), and the line was printed by that
    # thread. Here the demo's thread first blocks outright, then holds the GIL in pure Python.
    with LiveView.of(demo):
        await started(demo)
        demo.set_phase("blocked")
        time.sleep(3.0)  # blocking the event loop is the point
        demo.set_phase("busy")
        end, x = time.monotonic() + 2.6, 0
        while time.monotonic() < end:
            x = (x * 31 + 7) & 0xFFFF
    lines = capfd.readouterr().out.splitlines()
    matched = [m for m in map(LIVE.match, lines) if m]
    phases = [m.group(2).strip() for m in matched]
    assert phases.count("blocked") >= 2 and phases.count("busy") >= 2, \
        f"lines through each stretch expected:\n{chr(10).join(lines)}"
    times = [float(m.group(1)) for m in matched]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 1.6, f"silent for {max(gaps):.1f} s while the demo's thread was held: {times}"
    assert any("the demo's view" in ln and "s old" in ln for ln in lines), \
        "a line while the demo was held must say its view of the agent is old"


ORPHAN = """
import subprocess, sys, time
from pathlib import Path
from agent.demo.live import Spec
d, mount, root = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
Spec(cgroup_mount=mount, cgroup_root=root, hp="hp", be="be", probe=str(d / "p"), state=str(d / "state"),
     samples=str(d / "samples"), t0=time.monotonic(), every_s=0.2).write(d / "spec")
p = subprocess.Popen([sys.executable, "-m", "agent.demo.live", str(d / "spec")], stdout=subprocess.DEVNULL)
print(p.pid, flush=True)
samples, deadline = d / "samples", time.monotonic() + 30
while time.monotonic() < deadline:  # the demo lives until its view has printed (slow to start when busy)
    if samples.exists() and samples.read_text().count("\\n") >= 2:
        break
    time.sleep(0.05)
"""


def test_the_live_view_ends_when_the_demo_is_gone(real_root: RealRoot, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-c", ORPHAN, str(tmp_path), CgroupConfig().mount, real_root.name],
                         capture_output=True, text=True, timeout=60, check=True)
    pid = int(run.stdout.split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the live view outlived the demo that started it")
    assert (tmp_path / "samples").read_text().count("\n") >= 2, "it printed nothing while the demo lived"


def _freeze(real_root: RealRoot, rel: str, frozen: bool) -> None:
    h = real_root.hierarchy
    if h.is_v1("freezer"):
        (real_root.path("freezer", rel) / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
    else:
        (real_root.path("unified", rel) / "cgroup.freeze").write_text("1" if frozen else "0")


async def test_a_be_process_stuck_before_its_exec_does_not_hold_up_the_event_loop(
        demo: Demo, real_root: RealRoot) -> None:
    # A frozen cgroup stands in for a BE cgroup that gets no CPU: the child joins it before it execs and
    # cannot go on. The event loop (which runs the agent) must go on ticking meanwhile.
    h = real_root.hierarchy
    if not h.is_v1("freezer") and h.unified is None:
        pytest.skip("no freezer")
    rel = f"{BE_TIER}/stuck"
    real_root.mkcg(rel)  # in every hierarchy, the freezer's too
    _freeze(real_root, rel, True)
    try:
        spawn = asyncio.create_task(demo.start_bg("stuck", rel, workload_argv("burn")))
        start, ticks = time.monotonic(), 0
        while time.monotonic() - start < 1.5:
            await asyncio.sleep(0.05)
            ticks += 1
        assert not spawn.done(), "the child was to be held before its exec by the frozen cgroup"
        assert ticks >= 15, f"the event loop ticked {ticks} times in 1.5 s while a spawn waited"
    finally:
        _freeze(real_root, rel, False)
    await asyncio.wait_for(spawn, 30)
    assert demo.procs["stuck"].poll() is None


def test_the_demo_process_steps_into_the_agent_pod_and_back(real_root: RealRoot) -> None:
    real_root.mkcg(AGENT_POD)
    real_root.mkcg(f"{BE_TIER}/x")  # a sibling, so the pod is not the only thing in the tree
    code = ("import sys\nfrom cgroups.discovery import discover\n"
            "from agent.demo.spawn import move_self, move_back\n"
            "def cpu(): return [l for l in open('/proc/self/cgroup').read().splitlines() if ':cpu' in l][0]\n"
            "print(cpu()); back = move_self(discover(), sys.argv[1], sys.argv[2]); print(cpu())\n"
            "move_back(back); print(cpu())")
    run = subprocess.run([sys.executable, "-c", code, real_root.name, AGENT_POD], capture_output=True,
                         text=True, timeout=30, check=True)
    before, inside, after = run.stdout.splitlines()
    assert inside.endswith(f"/{real_root.name}/{AGENT_POD}"), inside
    assert after == before, f"not moved back: {after} (was {before})"
    assert not real_root.path("cpu", AGENT_POD).joinpath("cgroup.procs").read_text().strip()
