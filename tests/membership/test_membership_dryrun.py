"""Dry run audits each knob change once, not every tick the policy re-asserts it; nothing is written.

Real v1 cgroups under a private root: the executor alone, then the agent's real runtime (collector,
policies, executor) ticking in dry run over a BE tier with real processes.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kit.realcg import RealRoot
from kit.snapshot import node_snapshot

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.daemon.runtime import build
from agent.executors.apply import ActionExecutor
from agent.published import ActionRecord
from cgroups.writer import CgroupWriter
from qos.actions import Action, SetBeCpuIdle, SetBeCpuQuota, SetBeCpuset
from qos.model import NodeSnapshot, Resources

pytestmark = pytest.mark.cgroups


def _snap() -> NodeSnapshot:
    return node_snapshot(capacity=Resources(2000, 1 << 30), cpus=(0, 1))


def _files(real_root: RealRoot) -> tuple[str, ...]:
    return tuple((real_root.path(c, "besteffort") / f).read_text()
                 for c, f in (("cpuset", "cpuset.cpus"), ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.shares")))


async def test_dry_run_records_each_knob_once_per_change_and_writes_nothing(real_root: RealRoot) -> None:
    for c in ("cpu", "cpuset"):
        if not real_root.hierarchy.is_v1(c):
            pytest.skip(f"needs the v1 {c} controller")
    real_root.mkcg("besteffort/poda")
    real_root.spawn("besteffort/poda", ["sleep", "60"])
    before = _files(real_root)
    audit: list[ActionRecord] = []
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    ex = ActionExecutor(writer, "besteffort", {}, dry_run=True, rate_per_s=1.0, burst=1,
                        recheck_cooldown_s=1.0, audit=audit.append, now=time.monotonic(), tier_owned=True)

    tick: list[Action] = [SetBeCpuset((1,), "re-assert"), SetBeCpuIdle(True, "re-assert"),
                          SetBeCpuQuota(500, "q")]
    first = ex.execute(tick, _snap())
    assert [(r.kind, r.target, r.outcome) for r in first] == [
        ("set_be_cpuset", "1", "dry_run"), ("set_be_cpu_idle", "1", "dry_run"),
        ("set_be_cpu_quota", "50000", "dry_run")]
    for _ in range(5):
        assert ex.execute(tick, _snap()) == []
    assert len(audit) == 3

    changed = ex.execute([SetBeCpuset((0, 1), "grow"), SetBeCpuIdle(True, "again")], _snap())
    assert [(r.kind, r.target) for r in changed] == [("set_be_cpuset", "0,1")]
    back = ex.execute([SetBeCpuset((1,), "shrink")], _snap())
    assert [(r.kind, r.target) for r in back] == [("set_be_cpuset", "1")]
    assert len(audit) == 5
    assert _files(real_root) == before
    assert ex.cgroup_writes == 0


@pytest.mark.slow
async def test_dry_run_agent_audits_the_cpuset_once_over_many_ticks(real_root: RealRoot) -> None:
    for c in ("cpu", "cpuacct", "cpuset"):
        if not real_root.hierarchy.is_v1(c):
            pytest.skip(f"needs the v1 {c} controller")
    rt = build(AgentConfig(
        node=NodeConfig(name="test-node", cpus=2, memory="1Gi", scope="cgroup-root"),
        cgroups=CgroupConfig(root=real_root.name, setup_tiers=True, cleanup_on_exit=False),
        loop=LoopConfig(interval_s=0.2), eviction=EvictionConfig(dry_run=True), state=StateConfig(path="")))
    real_root.mkcg("besteffort/batch")
    real_root.spawn("besteffort/batch", ["sleep", "60"])
    before = (real_root.path("cpuset", "besteffort") / "cpuset.cpus").read_text()
    records: list[ActionRecord] = []
    try:
        for _ in range(8):
            pub = rt.loop.tick()
            records.extend(r for r in pub.recent_actions if r not in records)
            await asyncio.sleep(0.1)
    finally:
        rt.reader.close()
    knobs = [r for r in records if r.kind in ("set_be_cpuset", "set_be_cpu_idle")]
    assert {r.outcome for r in knobs} == {"dry_run"}
    per_target = {(r.kind, r.target) for r in knobs}
    assert len(knobs) == len(per_target), f"a dry-run knob was audited more than once: {knobs}"
    assert ("set_be_cpu_idle", "1") in per_target
    assert any(k == "set_be_cpuset" for k, _ in per_target), "the policy never asked for a BE cpuset"
    assert (real_root.path("cpuset", "besteffort") / "cpuset.cpus").read_text() == before
