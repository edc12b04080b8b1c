"""Hand-made snapshots and publications for the metrics tests (a 4-core, 8 GiB node)."""

from __future__ import annotations

import time

from kit.snapshot import container_id, node_snapshot, published
from kit.snapshot import workload as kit_workload

from agent.published import ActionRecord, Counters, Published
from qos.actions import EvictReason, HoldReason, SetBeCpuset
from qos.model import BeTierState, NodeSnapshot, Resources, Source, Tier, Usage, Workload

GiB = 1 << 30


def workload(
    i: int,
    *,
    source: Source = Source.K8S,
    tier: Tier = Tier.BESTEFFORT,
    milli_cpu: float | None = 100.0,
    memory: int | None = 64 << 20,
    requests: Resources | None = None,
) -> Workload:
    """Workload `i`: pod `pod-<i>` of namespace team-a (or YARN container `i`), keyed `<source>/<i>-uid` (i in
    hex), in `<tier>/w<i>`, priority 5000 if BE and 9000 if not."""
    be = tier is Tier.BESTEFFORT
    requests = requests or Resources()
    yarn = source is Source.YARN
    return kit_workload(f"{source.value}/{i:08x}-uid", be=be, priority=5000 if be else 9000, cpu=milli_cpu,
                        mem=memory, request_cpu=requests.milli_cpu, request_mem=requests.memory_bytes,
                        source=source, tier=tier, name=container_id(1, i, epoch=None) if yarn else f"pod-{i}",
                        cgroup=f"{tier.value}/w{i}", namespace="" if yarn else "team-a")


def small_node(now: float | None = None) -> NodeSnapshot:
    """Two HP pods, two BE pods, one YARN container; figures chosen so every sum is easy to check."""
    wl = (
        workload(1, tier=Tier.GUARANTEED, milli_cpu=1500, memory=2 * GiB, requests=Resources(2000, 2 * GiB)),
        workload(2, tier=Tier.BURSTABLE, milli_cpu=500, memory=1 * GiB, requests=Resources(250, GiB // 2)),
        workload(3, milli_cpu=300, memory=256 << 20, requests=Resources(1000, GiB)),
        workload(4, milli_cpu=200, memory=128 << 20, requests=Resources(500, GiB // 2)),
        workload(5, source=Source.YARN, milli_cpu=250, memory=512 << 20, requests=Resources(2000, 2 * GiB)),
    )
    return node_snapshot(wl, taken_at=time.time() if now is None else now,
                         capacity=Resources(4000, 8 * GiB), cpus=(0, 1, 2, 3),
                         node=Usage(milli_cpu=3000, memory_working_set_bytes=5 * GiB),
                         hp=Usage(milli_cpu=2000, memory_working_set_bytes=3 * GiB, cpu_throttled_ratio=0.02),
                         be=Usage(milli_cpu=750, memory_working_set_bytes=896 << 20, cpu_throttled_ratio=0.0),
                         system=Usage(milli_cpu=250, memory_working_set_bytes=1 * GiB),
                         be_tier=BeTierState(cpuset=(3,), quota_milli_cpu=None, cpu_idle=True,
                                             memory_high_bytes=2 * GiB),
                         hp_cpu_pressure_some_avg10=1.5,
                         stale={"yarn": "NodeManager REST timed out"})


def publication(
    tick: int = 7,
    *,
    snapshot: NodeSnapshot | None = None,
    tick_monotonic: float | None = None,
    interval_s: float = 1.0,
    synced: bool = True,
    actions: tuple[ActionRecord, ...] = (),
    tick_duration_s: float = 0.004,
    counters: Counters | None = None,
) -> Published:
    now = time.time()
    return published(
        small_node(now) if snapshot is None else snapshot,
        tick=tick,
        tick_started_at=now,
        tick_monotonic=time.monotonic() if tick_monotonic is None else tick_monotonic,
        tick_duration_s=tick_duration_s,
        collect_duration_s=0.002,
        interval_s=interval_s,
        be_cpu_granted_milli=1000,
        recent_actions=actions,
        actions=actions,
        pending_actions=(SetBeCpuset(cpus=(3,), reason="hp busy"),),
        source_age_s={"cgroups": 0.1, "kubelet": 0.8, "yarn": 12.5},
        sources_synced=synced,
        counters=counters
        or Counters(
            ticks=tick,
            tick_errors=1,
            evictions={(EvictReason.MEMORY_PRESSURE.value, Source.K8S.value): 3},
            eviction_failures={EvictReason.MEMORY_PRESSURE.value: 1},
            holds={("memory_eviction", HoldReason.STALE_DATA): 4},
            admissions_refused={"overcommitted": 2},
            cgroup_writes=40,
            cgroup_write_errors=2,
        ),
        be_cpu_floor_milli=1000,
    )
