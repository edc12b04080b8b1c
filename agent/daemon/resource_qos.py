"""Memory QoS and CPU burst, each pass: the kubelet's pods (`QosKubeletSource.qos_pods`) and the settings in
force (the NodeSLO's, else `resource_qos:`) → `qos.memory_qos.plan` / `qos.cpu_burst.plan` (pure) →
`ResourceQosExecutor`. Run by the batch limits' periodic pass (agent/daemon/batch_limits.py).

Where the kernel has no knob the feature is skipped, said once at start-up: memory QoS on cgroup v1 (an
upstream v1 kernel has no memory.min / memory.low), CPU burst where the cgroup has no `cpu.cfs_burst_us` /
`cpu.max.burst` (an upstream kernel before 5.14).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.executors.resource_qos import ResourceQosExecutor
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.qos_pods import QosKubeletSource
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.writer import CgroupWriter
from qos import cpu_burst, memory_qos

log = logging.getLogger("coloc.resource_qos")


class ResourceQosRunner:
    def __init__(self, source: QosKubeletSource, settings: Callable[[], ResourceQos], writer: CgroupWriter,
                 layout: Layout, node_allocatable_memory: int) -> None:
        self._source = source
        self._settings = settings
        self._layout = layout
        self._allocatable = node_allocatable_memory
        self.executor = ResourceQosExecutor(writer)
        self.memory_supported = not writer.hierarchy.is_v1("memory")
        self.burst_supported = _has_burst(writer)
        self.last: ResourceQos | None = None
        if not self.memory_supported:
            log.info("memory QoS skipped: cgroup v1 has no memory.min / memory.low (upstream kernel)")
        if not self.burst_supported:
            log.info("CPU burst skipped: this kernel has no cpu.cfs_burst_us / cpu.max.burst (before 5.14)")

    def _tiers(self) -> dict[str, str]:
        tier = self._layout.tier
        return {"": "", "burstable": tier("burstable"), "besteffort": tier("besteffort")}

    def pass_once(self) -> int:
        """One pass; how many knobs were written."""
        s = self.last = self._settings()
        pods = self._source.qos_pods()
        written = 0
        if self.memory_supported:
            active = s.memory.any_enabled
            mplan = memory_qos.plan(pods, s.memory, self._allocatable) if active else None
            if mplan is not None or self.executor.memory:
                written += self.executor.apply_memory(mplan, self._tiers())
        if self.burst_supported:
            bplan = cpu_burst.plan(pods, s.burst) if s.burst.enabled else None
            if bplan is not None or self.executor.burst:
                written += self.executor.apply_burst(bplan)
        return written


def _has_burst(writer: CgroupWriter) -> bool:
    name = "cpu.cfs_burst_us" if writer.hierarchy.is_v1("cpu") else "cpu.max.burst"
    try:
        return writer.has_file("cpu", "", name)
    except CgroupError:
        return False
