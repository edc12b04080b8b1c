"""The configuration of the node's QoS policies (CPU suppression, memory and CPU eviction, fail safe).

`qos.registry` turns it into the pipeline of policy objects that runs each tick (`qos.pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qos.cpu_eviction import CpuEvictionConfig
from qos.failsafe import FailsafeConfig
from qos.memory_eviction import MemoryEvictionConfig
from qos.suppression import SuppressionConfig


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The node's QoS policies: BE CPU suppression, CPU and memory eviction, the fail-safe. The settings a
    NodeSLO can set are marked in `coloc-agent config show`."""

    suppression: SuppressionConfig = field(default_factory=SuppressionConfig)
    cpu_eviction: CpuEvictionConfig = field(default_factory=CpuEvictionConfig)
    memory_eviction: MemoryEvictionConfig = field(default_factory=MemoryEvictionConfig)
    failsafe: FailsafeConfig = field(default_factory=FailsafeConfig)

    def __post_init__(self) -> None:
        for name, kind in (
            ("suppression", SuppressionConfig),
            ("cpu_eviction", CpuEvictionConfig),
            ("memory_eviction", MemoryEvictionConfig),
            ("failsafe", FailsafeConfig),
        ):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
