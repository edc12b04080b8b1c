"""All QoS policies behind one call: `decide(snapshot, config, state) -> (actions, new state)`.

Order: CPU suppression, then memory eviction (memory cannot be throttled, so it goes first), then CPU
eviction. Evictions are de-duplicated across policies: a workload one policy evicts (this tick, or earlier
and still present) is pending for the other, so its request and working set count as already released and
it is never picked twice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from qos import cpu_eviction, memory_eviction, suppression
from qos.actions import Action, Evict
from qos.cpu_eviction import CpuEvictionConfig, CpuEvictionState
from qos.failsafe import FailsafeConfig
from qos.memory_eviction import MemoryEvictionConfig, MemoryEvictionState
from qos.model import NodeSnapshot
from qos.suppression import SuppressionConfig, SuppressionState
from qos.victims import EvictedLog


@dataclass(frozen=True, slots=True)
class PolicyConfig:
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


@dataclass(frozen=True, slots=True)
class PolicyState:
    suppression: SuppressionState = field(default_factory=SuppressionState)
    cpu_eviction: CpuEvictionState = field(default_factory=CpuEvictionState)
    memory_eviction: MemoryEvictionState = field(default_factory=MemoryEvictionState)


def decide(
    snapshot: NodeSnapshot, config: PolicyConfig, state: PolicyState
) -> tuple[list[Action], PolicyState]:
    actions, sup = suppression.decide(snapshot, config.suppression, state.suppression)

    cpu_evicted = {key for key, _ in state.cpu_eviction.evicted}
    mem_actions, mem = memory_eviction.decide(
        snapshot,
        config.memory_eviction,
        state.memory_eviction,
        failsafe=config.failsafe,
        pending_keys=cpu_evicted,
    )
    evicting = {a.key for a in mem_actions if isinstance(a, Evict)}
    mem_evicted = {key for key, _ in mem.evicted} | evicting
    cpu_actions, cpu = cpu_eviction.decide(
        snapshot, config.cpu_eviction, state.cpu_eviction, failsafe=config.failsafe, pending_keys=mem_evicted
    )
    actions += mem_actions
    for a in cpu_actions:
        if isinstance(a, Evict):
            if a.key in evicting:
                continue
            evicting.add(a.key)
        actions.append(a)
    return actions, PolicyState(suppression=sup, cpu_eviction=cpu, memory_eviction=mem)


def forget_victims(state: PolicyState, keys: Collection[str]) -> PolicyState:
    """Victims whose eviction did not happen (refused by the executor's guards, or failed) are no longer a
    pending release: otherwise the node would wait on memory that is not coming back."""
    if not keys:
        return state

    def drop(log: EvictedLog) -> EvictedLog:
        return tuple((k, at) for k, at in log if k not in keys)

    return replace(
        state,
        memory_eviction=replace(state.memory_eviction, evicted=drop(state.memory_eviction.evicted)),
        cpu_eviction=replace(state.cpu_eviction, evicted=drop(state.cpu_eviction.evicted)),
    )
