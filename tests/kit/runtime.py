"""A real agent runtime (collector, policies, executors, loop) built in process on a test's private cgroup
root, run as an asyncio task, and small helpers to watch it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.cli.status import render
from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.config.standalone import LocalWorkload, StandaloneConfig
from agent.daemon.runtime import Runtime, build
from agent.demo.spawn import workload_argv
from agent.metrics.collector import ColocCollector
from agent.metrics.tally import ActionTally
from kit.realcg import RealRoot
from qos.policies import PolicyConfig


def runtime_config(root: str, *, cpus: float = 2, memory: int | str = "1Gi", policy: str = "cpuset",
                   threshold: float = 65.0, interval: float = 1.0, dry_run: bool = False,
                   workloads: tuple[LocalWorkload, ...] = (), audit: str = "",
                   policies: PolicyConfig | None = None) -> AgentConfig:
    pol = policies or PolicyConfig()
    pol = replace(pol, suppression=replace(pol.suppression, policy=policy, threshold_percent=threshold))
    return AgentConfig(
        node=NodeConfig(name="test-node", cpus=cpus, memory=memory, scope="cgroup-root"),
        cgroups=CgroupConfig(root=root, setup_tiers=True, cleanup_on_exit=False),
        loop=LoopConfig(interval_s=interval),
        eviction=EvictionConfig(dry_run=dry_run, grace_period_s=1.0, rate_per_minute=60, burst=5),
        audit=replace(AgentConfig().audit, path=audit),
        standalone=StandaloneConfig(workloads=workloads),
        policies=pol,
        state=StateConfig(path=""),
    )


@contextlib.asynccontextmanager
async def running(rt: Runtime) -> AsyncIterator[Runtime]:
    """Run the agent's loop as a task for the duration of the block."""
    stop = asyncio.Event()
    task = asyncio.create_task(rt.loop.run(stop))
    try:
        yield rt
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await rt.executor.drain(5)
        rt.reader.close()


def start_runtime(real_root: RealRoot, **kw: object) -> Runtime:
    return build(runtime_config(real_root.name, **kw))  # type: ignore[arg-type]


def spawn_hp(real_root: RealRoot, rel: str, threads: int, counter: Path) -> None:
    real_root.spawn(rel, workload_argv("hp", threads, counter))


def quota_file(real_root: RealRoot) -> Path:
    return real_root.path("cpu", "besteffort") / "cpu.cfs_quota_us"


def read_quota_milli(real_root: RealRoot) -> int | None:
    q = int(quota_file(real_root).read_text())
    return None if q < 0 else q // 100


def reported_modes(rt: Runtime) -> tuple[dict[str, float], str]:
    """The mode as /metrics and `coloc-agent status` show it, from the runtime's published view."""
    coll = ColocCollector(rt.board, version="test", top_n=5, max_label_values=10, actions=ActionTally())
    gauge = {s.labels["mode"]: s.value for fam in coll.collect() for s in fam.samples
             if s.name == "coloc_fast_path_mode"}
    pub = rt.board.get()
    assert pub is not None
    return gauge, render(pb.Status(tick=pub.tick, fast_path_mode=pub.fast_path_mode,
                                   fast_path_reason=pub.fast_path_reason))
