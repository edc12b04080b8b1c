"""Memory QoS and CPU burst, each pass: the kubelet's pods (`QosKubeletSource.qos_pods`) and the settings in
force (the NodeSLO's, else `resource_qos:`) → `qos.memory_qos.plan` / `qos.cpu_burst.plan` (pure) →
`ResourceQosExecutor`. A task of its own every `resource_qos.resync_s`, with or without batch limits.

Where the kernel has no knob the feature is skipped, said once at start-up: memory QoS on cgroup v1 (an
upstream v1 kernel has no memory.min / memory.low), CPU burst where the cgroup has no `cpu.cfs_burst_us` /
`cpu.max.burst` (an upstream kernel before 5.14).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.executors.resource_qos import CPU_BURST, MEMORY_QOS, HeldLimits, ResourceQosExecutor
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.qos_pods import QosKubeletSource
from agent.sources.settings import SettingsInForce
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.writer import CgroupWriter
from qos import cpu_burst, memory_qos
from qos.cpu_burst import CpuBurstPlan
from qos.memory_qos import MemoryQosPlan

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from agent.daemon.batch_limits import BatchLimitsController

log = logging.getLogger("coloc.resource_qos")
MAX_SERIES_PODS = 1000  # per-pod series beyond this many pods are left out
_NOT_NOTED = object()
_RESIZE_NOTE = {
    True: "the kubelet resizes pods in place (container statuses carry resources): a burst is held only on "
          "containers whose CPU resize restarts them, never on a pod cgroup (docs/coexistence.md)",
    False: "the kubelet does not resize pods in place (container statuses carry no resources): "
           "pods and containers hold their bursts",
    None: "not yet known whether the kubelet resizes pods in place (no running container seen): "
          "held as if it did",
}


@dataclass(frozen=True, slots=True)
class Plans:
    """One pass's decisions: the memory plan (None: hold nothing) and whether the executor has anything to
    do for it, and the burst plan."""

    memory: MemoryQosPlan | None
    memory_due: bool
    burst: CpuBurstPlan | None


class ResourceQosRunner:
    def __init__(self, source: QosKubeletSource, settings: SettingsInForce, writer: CgroupWriter,
                 layout: Layout, node_allocatable_memory: int, announce: bool = True) -> None:
        self._source = source
        self._settings = settings
        self._layout = layout
        self._allocatable = node_allocatable_memory
        self.executor = ResourceQosExecutor(writer)
        self.memory_supported = not writer.hierarchy.is_v1("memory")
        self.burst_supported = _has_burst(writer)
        self.last: ResourceQos | None = None
        self._noted: object = _NOT_NOTED
        self._writer = writer
        if announce and not self.memory_supported:
            log.info("memory QoS skipped: cgroup v1 has no memory.min / memory.low (upstream kernel)")
        if announce and not self.burst_supported:
            log.info("CPU burst skipped: this kernel has no cpu.cfs_burst_us / cpu.max.burst (before 5.14)")

    def _tiers(self) -> dict[str, str]:
        tier = self._layout.tier
        return {"": "", "burstable": tier("burstable"), "besteffort": tier("besteffort")}

    def plan(self) -> Plans:
        """This pass's plans, from the settings in force and the kubelet's pods. Nothing is planned until the
        kubelet has listed its pods and the settings are known (the NodeSLO read once, where it is on):
        before, every pod would look gone and its values given back."""
        mplan, memory_due, bplan = None, False, None
        if not (self._source.listed and self._settings.known):
            return Plans(mplan, memory_due, bplan)
        s = self.last = self._settings.resource_qos
        pods = self._source.qos_pods()
        if self.memory_supported:
            mplan = memory_qos.plan(pods, s.memory, self._allocatable) if s.memory.any_enabled else None
            memory_due = mplan is not None or bool(self.executor.memory)
        if self.burst_supported:
            resizes = self._source.kubelet_resizes
            if s.burst.enabled and resizes is not self._noted:
                self._noted = resizes
                log.info("CPU burst: %s", _RESIZE_NOTE[resizes])
            bplan = cpu_burst.plan(pods, s.burst, kubelet_resizes=resizes) if s.burst.enabled else None
        return Plans(mplan, memory_due, bplan)

    def apply(self, plans: Plans) -> int:
        """Put `plans` in place; how many knobs were written. After a pass on the kubelet's pods, what an
        earlier run held and this one does not is given back (`cgroups/holdings.py`)."""
        written = 0
        if plans.memory_due:
            written += self.executor.apply_memory(plans.memory, self._tiers())
        if self.burst_supported and self.last is not None:
            written += self.executor.apply_burst(plans.burst)
        if self.last is not None:
            self._writer.settle(MEMORY_QOS)
            self._writer.settle(CPU_BURST)
        return written

    def pass_once(self) -> int:
        """One pass; how many knobs were written."""
        return self.apply(self.plan())

    async def run(self, stop: asyncio.Event, resync_s: float) -> None:
        """A pass every `resync_s` until `stop`; a failed pass is logged and the next one runs."""
        while not stop.is_set():
            try:
                self.pass_once()
            except Exception:
                log.exception("resource QoS pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), resync_s)


def build(source: object, settings: SettingsInForce, writer: CgroupWriter, layout: Layout, *,
          wanted: bool) -> ResourceQosRunner | None:
    """The runner where the kubelet's pods are read; elsewhere None, and what an earlier run held for memory
    QoS and CPU burst is given back now. The runner runs also where nothing turns the features on (`wanted`
    False, then without the start-up lines on what the kernel lacks): what an earlier run held is given back
    however the features were turned off meanwhile."""
    if not isinstance(source, QosKubeletSource):
        writer.settle(MEMORY_QOS)
        writer.settle(CPU_BURST)
        return None
    return ResourceQosRunner(source, settings, writer, layout, node_allocatable_memory(), announce=wanted)


def node_allocatable_memory() -> int:
    """The node's memory (koordlet's `memory.high` bound for a container without a limit)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def held_limits(batch: BatchLimitsController | None, runner: ResourceQosRunner | None) -> HeldLimits:
    """What the limit executors hold now, for `status` (read at each call)."""
    enforced = batch.executor.enforced if batch is not None else {}
    if runner is None:
        return HeldLimits(enforced, {}, {})
    last = runner.last
    sources = (last.memory_source, last.burst_source) if last is not None else ("", "")
    return HeldLimits(enforced, runner.executor.held_memory(), runner.executor.held_burst(), *sources)


class ResourceQosMetrics:
    """`/metrics` for memory QoS and CPU burst: what each pod and container holds, labelled as the batch
    limits' series are (pod, level, cgroup, source). memory.high -1 is "max"."""

    def __init__(self, runner: ResourceQosRunner) -> None:
        self._runner = runner

    def describe(self) -> list[object]:
        return []

    def collect(self) -> list[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        runner, ex = self._runner, self._runner.executor
        labels = ["pod", "level", "cgroup", "source"]
        mn = GaugeMetricFamily("coloc_memory_qos_min_bytes", "memory.min of a pod or container.",
                               labels=labels)
        low = GaugeMetricFamily("coloc_memory_qos_low_bytes", "memory.low of a pod or container.",
                                labels=labels)
        high = GaugeMetricFamily("coloc_memory_qos_high_bytes", "memory.high of a container (-1: max).",
                                 labels=labels)
        burst = GaugeMetricFamily("coloc_cpu_burst_us", "cpu.max.burst (v1: cpu.cfs_burst_us) of a pod or "
                                  "container, in µs.", labels=labels)
        last = runner.last
        for name, values in sorted(ex.held_memory().items())[:MAX_SERIES_PODS]:
            for v in values:
                row = [name, "container" if v.sets_high else "pod", v.rel, last.memory_source if last else ""]
                mn.add_metric(row, v.min_bytes)
                low.add_metric(row, v.low_bytes)
                if v.sets_high:
                    high.add_metric(row, -1 if v.high_bytes is None else v.high_bytes)
        for name, bursts in sorted(ex.held_burst().items())[:MAX_SERIES_PODS]:
            for level, rel, us in bursts:
                burst.add_metric([name, level, rel, last.burst_source if last else ""], us)
        out: list[Metric] = [mn, low, high, burst]
        for metric, doc, value in (
                ("coloc_resource_qos_writes", "Memory QoS and CPU burst knob writes.", ex.writes),
                ("coloc_resource_qos_restores", "Cgroups given the kernel's defaults back.", ex.restores)):
            counter = CounterMetricFamily(metric, doc)
            counter.add_metric([], value)
            out.append(counter)
        return out


def _has_burst(writer: CgroupWriter) -> bool:
    name = "cpu.cfs_burst_us" if writer.hierarchy.is_v1("cpu") else "cpu.max.burst"
    try:
        return writer.has_file("cpu", "", name)
    except CgroupError:
        return False
