"""Every benchmark's `--quick` mode runs and ends with one JSON object of finite figures.

This keeps `bench/` alive: an API change that breaks a benchmark fails the build. The figures themselves
are not held to targets here (the machine is noisy; targets are read from the full runs).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from kit.realcg import RealRoot

REPO = Path(__file__).resolve().parents[2]

IO_FLOODS = ("direct_write", "buffered_write", "direct_read")  # bench/io.py's

# bench → keys its last line must carry (the figures the docs and closing notes quote)
BENCHES = {
    "collect.py": ("psi_worst_ratio", "no_psi_worst_collect_ms_per_1000", "results"),
    "api.py": ("snapshot_p99_ms", "floor_snapshot_p99_ms", "snapshot_p99_over_floor_ratio",
               "watch_events_per_s_1_subscriber"),
    "recovery.py": ("real_3_nodes_recovery_s", "replayed_20_nodes_recovery_s"),
    "payload.py": ("tick_cadence_ratio_50mb",),
    "interference.py": ("hp_throughput_ratio_with_agent_cpuset", "hp_throughput_ratio_no_agent"),
    "network.py": ("hp_share_of_link", "be_share_when_hp_idle", "ceiling_change_s"),
    "footprint.py": ("cpu_percent", "wakeups_per_s", "rss_mb", "rss_saved_by_lazy_kube_mb"),
    "metrics_flood.py": ("idle_connections_tick_cadence", "idle_connections_open_s",
                         "tick_mean_ratio_scrapers"),
    "holdings.py": ("first_pass_append_ms", "first_pass_rewrite_ms", "rewrite_over_append_ratio",
                    "steady_pass_journal_writes"),
    "io.py": ("alone_fsync_p99_ms", "alone_read_p99_ms", "alone_ops_per_s", "direct_write_fsync_p99_ms",
              "be_alone_direct_write_mb_per_s", "buffered_write_be_cgroup_mb_per_s",
              *(f"{f}_agent_{x}" for f in IO_FLOODS
                for x in ("fsync_p99_ms", "read_p99_ms", "fsync_p99_over_alone_ratio",
                          "read_p99_over_alone_ratio", "ops_over_alone_ratio")),
              *(f"be_alone_{f}_agent_over_alone_ratio" for f in IO_FLOODS),
              "io_cut_s_median", "io_cut_s_max", "io_lift_s_median", "io_lift_s_max"),
    "soak.py": ("series_after_warmup", "series_end", "rss_mb_after_warmup", "rss_mb_end",
                "rss_slope_mb_per_min_after_warmup", "scrape_errors", "agent_log_errors"),
    "replay.py": ("tick_ms_trace_off", "tick_ms_trace_on", "tick_cpu_ms_trace_off", "tick_cpu_ms_trace_on",
                  "record_ms_per_tick", "trace_bytes_per_tick_real",
                  "trace_bytes_per_tick_synthetic", "trace_mb_per_day", "replay_day_s", "replay_x_real_time",
                  "ticks_differing"),
    "load.py": ("tick_interval_p99_ratio", "rpc_snapshot_p99_ms", "agent_vm_hwm_mib", "errors",
                "snapshot_quiet_p99_ms"),
}

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("bench")]


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_bench_quick_mode_prints_its_figures(bench: str, real_root: RealRoot) -> None:
    # real_root only gates the run: it skips (or fails under COLOC_REQUIRE_CGROUPS=1) without writable cgroups
    run = subprocess.run([sys.executable, str(REPO / "bench" / bench), "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=240, check=False)
    # stderr's head too: a bench that could not measure a figure names it at the start of one long line
    assert run.returncode == 0, (f"{bench} --quick failed:\n{run.stdout[-2000:]}\n{run.stderr[:600]}\n...\n"
                                 f"{run.stderr[-2400:]}")
    last = run.stdout.strip().splitlines()[-1]
    figures = json.loads(last)
    assert isinstance(figures, dict) and figures, f"{bench}: last line is not a JSON object: {last[:200]}"
    for key in BENCHES[bench]:
        assert key in figures, f"{bench}: {key} missing from {sorted(figures)}"
    numbers = _numbers(figures)
    assert numbers, f"{bench}: no figure in {last[:200]}"
    assert all(math.isfinite(n) for n in numbers), f"{bench}: non-finite figure in {last[:300]}"
