"""The agent on a systemd-driver node (pods made by systemd as the kubelet asks for them) with its fast path
as it is meant to run: root with CAP_SYS_RESOURCE takes the default sub-second PSI trigger, so the mode is
`psi-trigger` (what `coloc-agent status` and /metrics report), and an HP stall wakes the loop, which cuts BE.
The cut is set through systemd and survives a daemon-reload; at exit the tier is given back its every CPU.
Functional only: timings under emulation are not figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import replace

import pytest
from kit.poll import still, until
from kit.runtime import reported_modes
from kit.systemd import SystemdPods

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.daemon.psi_wake import PSI_TRIGGER
from agent.daemon.runtime import build
from qos.policies import PolicyConfig

pytestmark = [pytest.mark.guest, pytest.mark.cgroups, pytest.mark.slow]

BUSY = [sys.executable, "-c", "while True: pass"]
TIER = "kubepods-besteffort.slice"


def _config() -> AgentConfig:
    pol = PolicyConfig()
    pol = replace(pol, suppression=replace(pol.suppression, policy="cfsQuota", threshold_percent=90.0))
    return AgentConfig(
        node=NodeConfig(name="guest-node", cpus=2, memory="1Gi", scope="cgroup-root"),
        cgroups=CgroupConfig(root="kubepods", setup_tiers=False, cleanup_on_exit=False),
        loop=LoopConfig(interval_s=1.0),  # the default trigger: "some 20000 500000"
        eviction=EvictionConfig(dry_run=False),
        state=StateConfig(path=""),
        policies=pol,
    )


def _quota_milli(cpu_max: str) -> int | None:
    quota, period = cpu_max.split()
    return None if quota == "max" else int(quota) * 1000 // int(period)


async def test_psi_trigger_mode_cuts_be_after_an_hp_stall_on_the_systemd_layout(
        systemd_pods: SystemdPods) -> None:
    hp = systemd_pods.pod("burstable", CPUWeight=80)
    systemd_pods.container(hp, ["sleep", "600"])
    be = systemd_pods.pod("besteffort", CPUWeight=1)
    for _ in range(2):
        systemd_pods.container(be, BUSY)
    tier = systemd_pods.cgroup(TIER)
    rt = build(_config())
    assert rt.writer.units is not None, "no systemd units: the BE tier's knobs would be set in the file alone"
    stop = asyncio.Event()
    task = asyncio.create_task(rt.loop.run(stop))
    try:
        hp_pressure = str(systemd_pods.cgroup(hp.slice) / "cpu.pressure")
        assert await until(lambda: rt.loop.waker is not None and hp_pressure in rt.loop.waker.paths, 60), (
            f"fast path {rt.loop.mode}: {rt.loop.mode_reason}")
        assert rt.loop.mode == PSI_TRIGGER
        assert await until(lambda: (p := rt.board.get()) is not None and p.fast_path_mode == PSI_TRIGGER, 10)
        gauge, status = reported_modes(rt)
        assert gauge == {"psi-trigger": 1, "adaptive-poll": 0, "off": 0}
        assert "fast path psi-trigger" in status, status

        # BE grows towards 90 % of 2 CPUs while HP is idle
        def be_quota() -> int:
            return _quota_milli((tier / "cpu.max").read_text()) or 10**9
        assert await until(lambda: 1000 <= be_quota() < 10**9, 60), (tier / "cpu.max").read_text()
        before, psi0 = be_quota(), rt.loop.psi_wakeups
        for _ in range(2):  # HP busy on every CPU: it stalls while BE holds its quota
            systemd_pods.container(hp, BUSY)
        assert await until(lambda: rt.loop.psi_wakeups > psi0, 30), "no PSI event woke the loop"
        assert await until(lambda: be_quota() < before, 30), f"BE kept {be_quota()} milli-CPU"
        # Set through systemd too: its own property, so a daemon-reload keeps the cut (had systemd put its
        # value back, the writer would have found another value and counted an override when re-asserting).
        assert systemd_pods.property(TIER, "CPUQuotaPerSecUSec") != "infinity"
        overrides = sum(rt.writer.override_counts.values())
        systemd_pods.reload()
        assert be_quota() < before
        assert await still(lambda: sum(rt.writer.override_counts.values()) == overrides, 2.5), \
            list(rt.writer.overrides)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await rt.executor.drain(5)
        rt.executor.release_be()
        with contextlib.suppress(Exception):
            rt.close()
    assert (tier / "cpu.max").read_text().split()[0] == "max", "the BE quota outlived the agent"
    assert systemd_pods.property(TIER, "CPUQuotaPerSecUSec") == "infinity"
