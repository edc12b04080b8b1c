"""The demo's agent records its trace, and `coloc-agent replay` on that directory works as the README runs it:
the recorded settings decide every tick as recorded, other settings are compared, and the plot is drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.poll import wait_for
from kit.realcg import RealRoot
from kit.runtime import running

from agent.cli.replay import main as replay_main
from agent.daemon.runtime import BE_TIER, build
from agent.demo.runner import HP, close_trace, demo_config, fresh_trace_dir
from agent.demo.spawn import workload_argv
from agent.trace.files import trace_files

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("cpu")]


async def test_the_demos_trace_replays_and_plots(real_root: RealRoot, tmp_path: Path,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "coloc-demo-trace"
    trace.mkdir()
    (trace / "trace-000007.ctr").write_bytes(b"an earlier demo's")
    (trace / "notes.txt").write_text("not ours")
    fresh_trace_dir(trace)
    assert [p.name for p in trace.iterdir()] == ["notes.txt"], "an earlier trace was left, or more removed"
    rt = build(demo_config(real_root.name, "1Gi", 0.5, trace))
    real_root.mkcg(HP)
    real_root.spawn(HP, workload_argv("burn"))
    real_root.mkcg(f"{BE_TIER}/batch-low")
    real_root.spawn(f"{BE_TIER}/batch-low", workload_argv("burn"))
    async with running(rt):
        assert await wait_for(lambda: (p := rt.board.get()) is not None and p.tick >= 8, 20) is not None
    close_trace(rt, trace)
    assert "coloc-agent replay" in capfd.readouterr().out
    assert trace_files(trace)

    assert replay_main([str(trace), "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["ticks"] >= 8 and out["ticks_differing"] == 0
    png = tmp_path / "replay.png"
    assert replay_main([str(trace), "--set", "policies.suppression.threshold_percent=75", "--plot",
                        str(png)]) == 0
    text = capfd.readouterr().out
    assert "policies.suppression.threshold_percent 65.0 → 75" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
