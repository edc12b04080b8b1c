"""The agent on a systemd-driver node evicts a BE memory hog: the pod's processes, in a container scope
systemd made, are killed through the cgroup; the HP pod is untouched; systemd then drops the empty scope.
The node's memory capacity is set from what the pods really hold, so the pressure is real working set."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from kit.poll import still, until
from kit.realcg import alive
from kit.systemd import SystemdPods, is_active

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.daemon.runtime import build
from agent.demo.spawn import workload_argv
from cgroups.discovery import discover
from cgroups.reader import CgroupReader

pytestmark = [pytest.mark.guest, pytest.mark.cgroups, pytest.mark.slow]

MIB = 1 << 20


async def test_a_be_memory_hog_in_a_systemd_scope_is_evicted_and_hp_is_untouched(
        systemd_pods: SystemdPods, tmp_path: Path) -> None:
    hp = systemd_pods.pod("burstable", CPUWeight=40)
    hp_proc = systemd_pods.container(hp, workload_argv("hog", 60, 0.05, 60))
    be = systemd_pods.pod("besteffort", CPUWeight=1)
    be_proc = systemd_pods.container(be, workload_argv("hog", 50, 0.05, 200))
    with CgroupReader(discover(), "kubepods.slice") as reader:
        def held() -> bool:
            return ((reader.sample(hp.rel).memory_working_set_bytes or 0) >= 60 * MIB
                    and (reader.sample(be.rel).memory_working_set_bytes or 0) >= 200 * MIB)
        assert await until(held, 60), "the memory holders never got their memory"
        root_ws = reader.sample("").memory_working_set_bytes or 0
    audit = tmp_path / "audit.jsonl"
    cfg = AgentConfig(  # 80 % of the capacity in use: above the 70 % eviction threshold
        node=NodeConfig(name="guest-node", cpus=2, memory=int(root_ws / 0.8), scope="cgroup-root"),
        cgroups=CgroupConfig(root="kubepods", setup_tiers=False, cleanup_on_exit=False),
        loop=LoopConfig(interval_s=0.5),
        eviction=EvictionConfig(dry_run=False, grace_period_s=1.0, rate_per_minute=60, burst=5),
        state=StateConfig(path=""),
    )
    cfg = replace(cfg, audit=replace(cfg.audit, path=str(audit)))
    rt = build(cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.loop.run(stop))
    try:
        assert await until(lambda: not alive(be_proc.pid), 60), "the BE memory hog was not evicted"
        # a further round would happen here if it over-evicted
        assert await still(lambda: alive(hp_proc.pid), 2.0), "the HP pod was touched"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await rt.executor.drain(5)
        rt.executor.release_be()
        rt.close()
    assert alive(hp_proc.pid), "the HP pod was touched"
    os.kill(hp_proc.pid, 0)
    evicts = [r for r in map(json.loads, audit.read_text().splitlines())
              if r["kind"] == "evict" and r["outcome"] == "started"]
    assert [r["target"] for r in evicts] == [f"local/{be.rel}"], evicts
    assert evicts[0]["policy"] == "memory_pressure"
    assert await until(lambda: not is_active(be.containers[0]), 30), "systemd kept the emptied scope"
