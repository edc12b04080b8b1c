"""Config of memory QoS and CPU burst (`resource_qos:`): koordlet's `CgroupReconcile` memory QoS and
`CPUBurst` strategy on upstream kernels, the fallback where the node's NodeSLO gives none."""

from __future__ import annotations

from dataclasses import dataclass, field

from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosSettings

__all__ = ["ResourceQosConfig"]


@dataclass(frozen=True)
class ResourceQosConfig:
    """`memory_qos`: per class (`lsr`, `ls`, `be`, `system`) `enable`, `min_limit_percent`,
    `low_limit_percent`, `throttling_percent` (0..100) as a NodeSLO's `resourceQOSStrategy.<class>.memoryQOS`;
    `cpu_burst`: `policy` (none | cpuBurstOnly | cfsQuotaBurstOnly | auto) and `cpu_burst_percent` (1..10000)
    as its `cpuBurstStrategy`. Off by default, as koordlet's defaults are. Written by the batch limits'
    periodic pass (`batch_limits.resync_s`), with the kubelet source on (docs/batch-resources.md)."""

    memory_qos: MemoryQosSettings = field(default_factory=MemoryQosSettings)
    cpu_burst: CpuBurstSettings = field(default_factory=CpuBurstSettings)
