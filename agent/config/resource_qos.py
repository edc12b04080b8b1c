"""Config of memory QoS and CPU burst (`resource_qos:`): koordlet's `CgroupReconcile` memory QoS and
`CPUBurst` strategy on upstream kernels, the fallback where the node's NodeSLO gives none."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.config.load import ConfigError
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosSettings
from qos.validation import bounded, check_bounds

__all__ = ["ResourceQosConfig"]


@dataclass(frozen=True)
class ResourceQosConfig:
    """`memory_qos`: per class (`lsr`, `ls`, `be`, `system`) `enable`, `min_limit_percent`,
    `low_limit_percent`, `throttling_percent` (0..100) as a NodeSLO's `resourceQOSStrategy.<class>.memoryQOS`;
    `cpu_burst`: `policy` (none | cpuBurstOnly | cfsQuotaBurstOnly | auto) and `cpu_burst_percent` (1..10000)
    as its `cpuBurstStrategy`. Off by default, as koordlet's defaults are. A pass every `resync_s` (koordlet's
    reconciler: 10 s) whenever the kubelet source is on (with nothing turned on it only gives back bursts an
    earlier run left); batch limits need not be on (docs/batch-resources.md)."""

    memory_qos: MemoryQosSettings = field(default_factory=MemoryQosSettings)
    cpu_burst: CpuBurstSettings = field(default_factory=CpuBurstSettings)
    resync_s: float = bounded(10.0, 1.0, 600.0)  # seconds between passes over every pod

    def __post_init__(self) -> None:
        check_bounds(self, "resource_qos", ConfigError)

    @property
    def turned_on(self) -> bool:
        """Whether the YAML itself turns memory QoS or CPU burst on."""
        return self.memory_qos.any_enabled or self.cpu_burst.enabled
