"""bench/batch_limits.py and bench/tier_memory.py --quick run on real cgroups and end with their JSON line
(figures, not targets)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from kit.realcg import RealRoot

REPO = Path(__file__).resolve().parents[2]
KEYS = ("creation_pod_p50_ms", "creation_pod_p99_ms", "creation_container_p99_ms", "periodic_pod_p50_ms",
        "periodic_pod_p99_ms", "creation_pod_n", "periodic_pod_n")

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("bench")]


def test_batch_limits_bench_quick_mode_prints_its_figures(real_root: RealRoot) -> None:
    # real_root only gates the run: it skips (or fails under COLOC_REQUIRE_CGROUPS=1) without writable cgroups
    proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "batch_limits.py"), "--quick"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"--quick failed:\n{out[-2000:]}\n{err[-3000:]}"
    # its private root (coloc-bench-<its pid>-…) is gone from every cgroup mount, the cgroup2 one included
    left = [str(d) for d in Path("/sys/fs/cgroup").glob(f"*/coloc-bench-{proc.pid}-*")]
    assert not left, left
    figures = json.loads(out.strip().splitlines()[-1])
    for key in KEYS:
        assert key in figures and math.isfinite(figures[key]), f"{key} missing or not finite in {figures}"
    assert figures["creation_pod_n"] == 12 and figures["periodic_pod_n"] == 3
    # every cgroup got its limits: the bench fails otherwise; the periodic pass is slower than creation
    assert figures["periodic_pod_p50_ms"] > figures["creation_pod_p50_ms"]


def test_tier_memory_bench_quick_mode_prints_its_figures(real_root: RealRoot) -> None:
    run = subprocess.run([sys.executable, str(REPO / "bench" / "tier_memory.py"), "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, f"--quick failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    for case in ("alone", "off", "high", "high_max"):
        for key in ("hp_throughput_ratio", "hp_major_faults", "hp_oom_kills", "hog_oom_kills_in_tier"):
            assert math.isfinite(figures[f"{case}_{key}"]), f"{case}_{key} in {figures}"
    # the hard cap stops the hog in the BE tier at the budget (1200 MiB hog, 512 MiB budget)
    assert figures["high_max_hog_oom_kills_in_tier"] >= 1
