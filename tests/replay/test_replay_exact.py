"""A trace recorded from a real agent on real cgroups, with real BE and HP load, replays exactly.

The private root is a 2-CPU "node" whose memory capacity is set from what the test's memory holders really
use, so memory pressure makes the agent evict; an HP service burns CPU, so suppression moves BE's budget; a
scheduler's admission too big for the batch budget is refused. Replayed with the settings it was recorded
under, the trace gives back every tick's decision (actions and named outputs), the eviction and the refusal;
replayed with a lower suppression threshold, BE gets less CPU.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.poll import wait_for
from kit.realcg import RealRoot, alive
from kit.runtime import running, runtime_config, spawn_hp

from agent.cli.replay import main as replay_main
from agent.config.standalone import LocalWorkload
from agent.config.trace import TraceConfig
from agent.daemon.runtime import build
from agent.demo.spawn import workload_argv
from agent.state.records import AdmitRequest
from agent.trace import overrides
from agent.trace.files import trace_files
from agent.trace.replay import Replay, records
from cgroups.reader import CgroupReader
from qos.model import Resources, Source

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("cpu")]

MIB = 1 << 20
HOGS = {"besteffort/low": 150, "besteffort/high": 40, "hp-mem": 40}
PRIORITIES = (LocalWorkload("besteffort/low", priority=3000), LocalWorkload("besteffort/high", priority=5000),
              LocalWorkload("besteffort/burn", priority=6000))


async def _working_sets(real_root: RealRoot) -> dict[str, int]:
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    try:
        def ready() -> bool:
            return all((reader.sample(r).memory_working_set_bytes or 0) >= m * MIB for r, m in HOGS.items())

        assert await wait_for(ready, 20, poll=0.05) is not None, "memory holders never got their memory"
        return {r: reader.sample(r).memory_working_set_bytes or 0 for r in ["", *HOGS]}
    finally:
        reader.close()


async def _record(real_root: RealRoot, trace_dir: Path) -> int:
    """Run the agent with a trace until it has evicted and refused an admission; the ticks it ran."""
    pids = {}
    for rel, mib in HOGS.items():
        real_root.mkcg(rel)
        pids[rel] = real_root.spawn(rel, workload_argv("hog", mib, 0.05, mib)).pid
    real_root.mkcg("besteffort/burn")
    real_root.spawn("besteffort/burn", workload_argv("burn"))
    real_root.mkcg("hp")
    spawn_hp(real_root, "hp", 1, trace_dir.parent / "hp-counter")
    ws = await _working_sets(real_root)
    # reaching 68 % of this capacity takes evicting `low` (most of it), and nothing else
    capacity = int((ws[""] - ws["besteffort/low"] * 0.8) / 0.68)
    cfg = runtime_config(real_root.name, memory=capacity, interval=0.3, workloads=PRIORITIES,
                         policy="cfsQuota")
    # 1 kB files: the trace rotates many times, and each file must carry on from the last
    trace = TraceConfig(enabled=True, dir=str(trace_dir), file_mb=0.001, files=500)
    cfg = dataclasses.replace(cfg, trace=trace)
    rt = build(cfg)
    assert rt.trace is not None and rt.trace.recorder is not None
    async with running(rt):
        assert await wait_for(lambda: (p := rt.board.get()) is not None and p.tick >= 3, 10) is not None
        too_big = AdmitRequest("yarn/container_e01_1700000000000_0001_01_000002",
                               "application_1700000000000_0001", Source.YARN, Resources(64_000, 1 << 40))
        result = rt.ledger.admit(too_big, int(time.time() * 1000))
        assert not result.accepted, "an admission larger than the node was accepted"
        assert await wait_for(lambda: not alive(pids["besteffort/low"]), 20, poll=0.05) is not None, \
            "nothing was evicted"
        ticks = rt.board.get().tick  # type: ignore[union-attr]
        assert await wait_for(lambda: rt.board.get().tick >= ticks + 15, 15) is not None  # type: ignore[union-attr]
    rt.trace.close()
    pub = rt.board.get()
    assert pub is not None
    return pub.tick


async def test_a_real_agents_trace_replays_tick_for_tick(real_root: RealRoot, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    trace_dir = tmp_path / "trace"
    ticks = await _record(real_root, trace_dir)
    files = trace_files(trace_dir)
    assert len(files) >= 2, "the trace should have rotated at 1 kB"

    first = list(itertools.islice(records(trace_dir), 2))
    assert first[0]["k"] == "head" and first[0]["origins"]["suppression.policy"] == "yaml"
    assert first[1]["k"] == "tick" and "standalone" in first[1]["ages"], "the sources' freshness is missing"

    replay = Replay().run(records(trace_dir))
    assert replay.recorded.ticks == ticks, "a tick is missing from the trace"
    assert replay.differing == 0, f"a tick decided differently: {replay.first_difference}"
    assert replay.restarts == 0
    assert [e["key"] for e in replay.recorded.evictions] == ["local/besteffort/low"]
    assert replay.replayed.evictions == replay.recorded.evictions
    assert replay.recorded.refused and replay.replayed.refused == replay.recorded.refused
    assert replay.recorded.refused[0]["refusal"] in ("insufficient_cpu", "budget_unknown")
    assert replay.replayed.grants == replay.recorded.grants
    assert len({g for g in replay.recorded.grants if g is not None}) >= 2, "suppression never moved BE"

    # the same through the command, as an operator runs it, in a process of its own (another hash seed: no
    # decision may hang on the order of a set)
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "agent.cli", "replay", str(trace_dir), "--json"],
                              env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ticks_differing"] == 0 and out["recorded"]["evictions"] == 1
    assert out["recorded"]["admissions_refused"] >= 1

    # a lower suppression threshold gives BE less CPU, at every tick and on average
    lower = Replay(lambda s: overrides.apply(s, [("policies.suppression.threshold_percent", 40)]))
    lower.run(records(trace_dir))
    rec, low = lower.recorded.summary(), lower.replayed.summary()
    assert low["be_budget_mean_milli"] < rec["be_budget_mean_milli"]
    assert low["be_cpu_core_s"] < rec["be_cpu_core_s"]
    assert all(b <= a for a, b in zip(lower.recorded.grants, lower.replayed.grants, strict=True)
               if a is not None and b is not None)
    assert lower.differing > 0
    assert replay_main([str(trace_dir), "--set", "policies.suppression.threshold_percent=40"]) == 0
    text = capsys.readouterr().out
    assert "policies.suppression.threshold_percent 65.0 → 40" in text
