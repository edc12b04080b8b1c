"""The disk guard in a real `coloc-agent run` (standalone, its own cgroup root) on the real kernel (v1 blkio
here; v2 io in the cgroup v2 + systemd guest): BE floods the disk uncapped while HP is idle, is cut to the
floor once an HP process starts committing (4 KiB write + fsync), gets the disk back once HP stops, and a
clean exit puts back what was there before the agent. What it holds after a `kill -9` is the holdings
test's (tests/batchres/test_batchres_holdings.py, holder `be_io`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kit.agentproc import agent_argv, agent_config, metric, running_agent, sample, samples
from kit.diskio import be_cap, can_cap, commit_argv, flood_argv, on_disk
from kit.poll import holds, wait
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]
FLOOR = 20_000_000


def test_be_is_cut_while_hp_commits_and_gets_the_disk_back_when_hp_stops(real_root: RealRoot,
                                                                          tmp_path: Path) -> None:
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    port = free_port()
    log = tmp_path / "agent.log"
    real_root.mkcg("agent")  # on v2 its parent hands cpuset down only to what the test kit makes
    with on_disk() as (disk, dev):
        cfg = agent_config(tmp_path, f"{real_root.name}/agent", port, loop={"interval_s": 1.0},
                           cgroups={"cleanup_on_exit": False},
                           io={"devices": [dev], "policy": {"floor_mbps": FLOOR / 1e6, "stall_percent": 0}})
        with running_agent(cfg, log) as agent:
            assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), log.read_text()[-3000:]
            tier = "agent/besteffort"
            real_root.mkcg(f"{tier}/batch")
            flood = real_root.spawn(f"{tier}/batch", flood_argv(disk / "be.out"), stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                assert holds(lambda: be_cap(real_root, tier, dev) == (None, None, None, None), 2.0), \
                    "BE capped while HP does no IO"
                real_root.mkcg("agent/hp")
                started = time.monotonic()
                hp = real_root.spawn("agent/hp", commit_argv(disk / "hp.out"))
                assert wait(lambda: be_cap(real_root, tier, dev)[1] == FLOOR, 10), log.read_text()[-3000:]
                cut_s = time.monotonic() - started
                hp.kill()
                hp.wait(10)
                stopped = time.monotonic()
                assert wait(lambda: be_cap(real_root, tier, dev) == (None, None, None, None), 10), \
                    log.read_text()[-3000:]
                lifted_s = time.monotonic() - stopped
                # The loop ticks once a second; the guard wakes it: within about a second both ways (the
                # bench measures it, bench/io.py); a generous bound here, the host is shared.
                assert cut_s < 4.0 and lifted_s < 4.0, (cut_s, lifted_s)
                hp = real_root.spawn("agent/hp", commit_argv(disk / "hp.out"))
                assert wait(lambda: be_cap(real_root, tier, dev)[1] == FLOOR, 10), log.read_text()[-3000:]
                # v1 spreads the cap below the tier (not hierarchical): the tier, batch and hadoop-yarn
                v1 = real_root.hierarchy.is_v1("blkio")
                assert sample(port, "coloc_holdings", holder="be_io") == (3 if v1 else 1)
                if v1:  # the one busy leaf gets the whole floor
                    assert be_cap(real_root, f"{tier}/batch", dev)[1] == FLOOR
                # who uses the disk, what BE is allowed: /metrics and `coloc-agent status`
                assert wait(lambda: sample(port, "coloc_io_be_cap_bytes_per_second", device=dev,
                                           direction="write") == FLOOR, 5)
                batch = (("name", "batch"), ("namespace", ""), ("source", "local"), ("tier", "besteffort"))
                assert wait(lambda: samples(port).get("coloc_workload_io_bytes_per_second", {})
                            .get(batch, 0) > 0, 5), {k: v for k, v in samples(port).items() if "_io_" in k}
                shown = subprocess.run(agent_argv("status", "--socket", str(tmp_path / "agent.sock")),
                                       check=True, capture_output=True, text=True, timeout=30).stdout
                assert f"disk {dev}" in shown and "write 20.0 MB/s 400 IO/s" in shown, shown
                assert "batch (BE)" in shown and "hp (HP)" in shown, shown
                assert agent.poll() is None
            finally:
                os.killpg(flood.pid, signal.SIGKILL)
                flood.wait(10)
        # a clean exit puts back what was there before the agent: nothing
        assert be_cap(real_root, tier, dev) == (None, None, None, None)
        hp.kill()
        hp.wait(10)


def test_sustained_need_at_the_floor_evicts_the_heaviest_be_io_user_when_turned_on(real_root: RealRoot,
                                                                                      tmp_path: Path) -> None:
    """`io.policy.evict` (off by default): HP has needed the disk for `evict_after_s` with BE at its floor, so
    the BE workload that did the most IO is evicted (the standalone evictor kills its processes); the one
    that did none is left."""
    if not can_cap(real_root):
        pytest.skip("no IO controller that caps (v1 blkio, or io on pure v2)")
    port = free_port()
    log = tmp_path / "agent.log"
    real_root.mkcg("agent")
    with on_disk() as (disk, dev):
        policy = {"stall_percent": 0, "evict": True, "evict_after_s": 1}
        cfg = agent_config(tmp_path, f"{real_root.name}/agent", port, cgroups={"cleanup_on_exit": False},
                           io={"devices": [dev], "policy": policy}, eviction={"grace_period_s": 1})
        with running_agent(cfg, log) as agent:
            assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), log.read_text()[-3000:]
            tier = "agent/besteffort"
            for name in ("heavy", "light", "hp"):
                real_root.mkcg(f"{tier}/{name}" if name != "hp" else "agent/hp")
            heavy = real_root.spawn(f"{tier}/heavy", flood_argv(disk / "be.out"), stderr=subprocess.DEVNULL)
            light = real_root.spawn(f"{tier}/light", ["sleep", "600"])
            real_root.spawn("agent/hp", commit_argv(disk / "hp.out"))
            assert wait(lambda: heavy.poll() is not None, 30), log.read_text()[-3000:]
            assert light.poll() is None
            evicted = {"reason": "io_pressure", "source": "local"}
            assert wait(lambda: sample(port, "coloc_evictions_total", **evicted) == 1, 5), log.read_text()
            assert agent.poll() is None
