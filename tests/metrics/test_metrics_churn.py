"""Bounded metrics under churn: the real agent process on a private cgroup root sees 1,000 workloads come and
go and decides (and holds) every tick with numbers that change, and the series it exports and its memory stay
within a bound. A hold's words carry its numbers; its label is a code from a fixed set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.agentproc import AgentProcess, agent_config, get, proc_kib
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from prometheus_client.parser import text_string_to_metric_families

from qos.actions import HoldReason

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

WAVES, PER_WAVE = 10, 100  # 1,000 workloads in all, 100 at a time
TICKS_PER_WAVE = 10  # decisions while a wave is there (0.2 s ticks)
RSS_GROWTH_KIB = 8 << 10  # after the first wave (warm-up), at most 8 MiB more
SERIES_SLACK = 8  # series that may come and go with what the agent is doing (pending actions, a new outcome)
HOG = "import time; b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(600)"


def _series(port: int) -> tuple[int, dict[tuple[str, str], float], float, float]:
    """(series exported, coloc_holds_total by (policy, reason), workloads the agent sees, ticks)."""
    _, body = get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    n, holds, workloads, ticks = 0, {}, 0.0, 0.0
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            n += 1
            if s.name == "coloc_holds_total":
                holds[(s.labels["policy"], s.labels["reason"])] = s.value
            elif s.name == "coloc_workloads":
                workloads += s.value
            elif s.name == "coloc_ticks_total":
                ticks = s.value
    return n, holds, workloads, ticks


def _ticks(port: int) -> float:
    try:
        return _series(port)[3]
    except OSError:
        return float("nan")


def _wave(root: RealRoot, w: int) -> list[str]:
    rels = [f"pod-hp-w{w}-{i:03d}" if i % 2 == 0 else f"besteffort/pod-be-w{w}-{i:03d}"
            for i in range(PER_WAVE)]
    for rel in rels:
        root.mkcg(rel)
    return rels


def _remove(root: RealRoot, rels: list[str]) -> None:
    for rel in rels:
        for d in root.dirs(rel):
            d.rmdir()


def test_1000_workloads_and_many_holds_keep_series_and_memory_bounded(real_root: RealRoot,
                                                                       tmp_path: Path) -> None:
    # Memory pressure all along: BE holds 48 MiB of a 56 MiB node, so the memory policy proposes an eviction
    # (dry run: nothing is killed), then holds while that victim is (as far as it knows) still terminating,
    # the MiB it will release in the hold's words.
    real_root.mkcg("besteffort/pod-hog")
    real_root.spawn("besteffort/pod-hog", [sys.executable, "-c", HOG])
    real_root.mkcg("pod-hp-burner")
    port = free_port()
    cfg = agent_config(tmp_path, real_root.name, port,
                       node={"name": "churn-node", "cpus": 2, "memory": "56Mi"}, eviction={"dry_run": True},
                       log={"level": "warning"})
    process = AgentProcess(cfg, tmp_path / "agent.log")
    agent = process.start()
    burner: subprocess.Popen[bytes] | None = None
    try:
        assert wait(lambda: _seen(port) >= 1, 30), process.log()  # the hog, at least
        base = _seen(port)  # the hog and the burner's pod
        peak_workloads, after = 0.0, []
        rss_warm = 0
        for w in range(WAVES):
            if w % 2 == 0:  # HP's CPU in bursts: suppression shrinks BE, then grows it back
                burner = real_root.spawn("pod-hp-burner", ["timeout", "2", "sh", "-c", "while :; do :; done"])
            rels = _wave(real_root, w)
            assert wait(lambda: _seen(port) >= PER_WAVE, 20), process.log()
            peak_workloads = max(peak_workloads, _series(port)[2])
            until = _ticks(port) + TICKS_PER_WAVE
            assert wait(lambda: _ticks(port) >= until, 20), process.log()  # noqa: B023 (waited on at once)
            _remove(real_root, rels)
            assert wait(lambda: _seen(port) <= base, 20), process.log()
            after.append(_series(port)[0])

            if w == 0:
                rss_warm = proc_kib(agent.pid, "VmRSS")
            assert agent.poll() is None, process.log()
        n, holds, _, ticks = _series(port)
        rss_end = proc_kib(agent.pid, "VmRSS")
    finally:
        if burner is not None and burner.poll() is None:
            burner.kill()
        process.stop()

    assert peak_workloads >= PER_WAVE and ticks >= WAVES * TICKS_PER_WAVE
    # Many holds, each counted under a code of the fixed set; the words (with their numbers) are not labels.
    assert sum(holds.values()) >= WAVES * TICKS_PER_WAVE, holds
    assert {reason for _, reason in holds} <= {str(c) for c in HoldReason}, holds
    assert ("memory_eviction", str(HoldReason.VICTIMS_TERMINATING)) in holds, holds
    # The series after each wave went: the same set, give or take what comes and goes with the agent's work.
    assert max(after) - min(after) <= SERIES_SLACK, after
    assert n - after[0] <= SERIES_SLACK, (after, n)
    assert rss_end - rss_warm <= RSS_GROWTH_KIB, (rss_warm, rss_end)


def _seen(port: int) -> float:
    """Workloads the agent sees (NaN while /metrics does not answer: no comparison holds)."""
    try:
        return _series(port)[2]
    except OSError:
        return float("nan")
