"""The protected-workloads fixture as the agent sees it: the kubelet's PodList fetched over HTTP from the
local fake kubelet (a real kubelet cannot run here), and snapshots built around the parsed workloads."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from kit.fakes.kubelet import FakeKubelet
from kit.snapshot import node_snapshot

from agent.config.sources import KubeletConfig
from agent.sources.kubelet import KubeletSource
from agent.sources.result import SourceResult
from cgroups.layout import Layout
from qos.model import BeTierState, NodeSnapshot, Resources, Usage, Workload

if TYPE_CHECKING:
    from qos.protection import ProtectionConfig

GIB = 1 << 30
PODLIST = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet" / "podlist-protected.json"
PROTECTED = {
    "kube-proxy-7xk2p",  # BestEffort, system-node-critical, DaemonSet, kube-system
    "calico-node-q8m4d",  # BestEffort, system-node-critical, DaemonSet
    "fluent-bit-h2k9z",  # BestEffort, DaemonSet only (a log shipper)
    "node-exporter-node-a",  # BestEffort static pod (config.source: file)
    "trainer-opted-out-0",  # koordinator BE with batch resources, but opted out by annotation
    "kube-state-metrics-6b9f7c-m4d2x",  # BestEffort in kube-system only
}
BATCH = {"spark-exec-7", "etl-28571300-x9k2m", "spark-exec-8"}
HP = {"web-5c7d8f-k2l9p"}


async def fetch(protection: ProtectionConfig | None = None, podlist: Path = PODLIST) -> SourceResult:
    """One refresh of a real KubeletSource against the fake kubelet serving `podlist`."""
    with FakeKubelet(podlist) as kubelet:
        cfg = KubeletConfig(url=kubelet.url, token_file="", timeout_s=2, resync_s=1, stale_after_s=30)
        kw = {} if protection is None else {"protection": protection}
        src = KubeletSource(cfg, Layout("cgroupfs"), **kw)  # type: ignore[arg-type]
        await src.refresh()
    result = src.workloads()
    assert result.stale_reason is None and result.rejected == (), result
    return result


def names(result: SourceResult, keys: object) -> set[str]:
    by_key = {w.key: w.name for w in result.workloads}
    return {by_key[k] for k in keys}  # type: ignore[attr-defined]


def with_usage(workloads: tuple[Workload, ...], *, mem: int = GIB,
               cpu: dict[str, float] | None = None) -> tuple[Workload, ...]:
    """Every workload holds `mem` of working set; CPU usage by pod name (0 otherwise)."""
    cpu = cpu or {}
    return tuple(
        dataclasses.replace(w, usage=Usage(milli_cpu=cpu.get(w.name, 0.0), memory_working_set_bytes=mem))
        for w in workloads)


def snapshot(workloads: tuple[Workload, ...], *, at: float, node_mem: int = 0, be_cpu: float = 0.0,
             be_tier: BeTierState | None = None) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=at, capacity=Resources(8000, 16 * GIB), cpus=tuple(range(8)),
                         node=Usage(milli_cpu=4000.0, memory_working_set_bytes=node_mem),
                         hp=Usage(milli_cpu=1000.0), be=Usage(milli_cpu=be_cpu),
                         system=Usage(milli_cpu=200.0), be_tier=be_tier or BeTierState(),
                         interval_s=1.0)
