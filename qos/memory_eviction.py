"""Memory eviction: when the node's working set reaches `threshold%` of its memory, evict BE down to `lower%`.

`usage% = node working set / capacity.memory_bytes × 100` (working set excludes page cache, so a big
file cache does not trigger it). At or above the threshold the need is
`working set − capacity × lower% − pending`, where pending is the working set of BE workloads already on
their way out (terminating, or evicted earlier and still present): it never evicts twice for the same
pressure. Victims are taken in the victim order until their working sets cover the need, and no further.
At most one round per `cool_down_s`. Defaults are koordlet's: threshold 70 %, lower = threshold − 2,
cool-down 4 s.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from qos import validation, victims
from qos.actions import Action, Evict, EvictReason, Hold, HoldReason
from qos.eviction import EvictionPolicy
from qos.failsafe import FailsafeConfig, eviction_blocker
from qos.model import NodeSnapshot

POLICY_NAME = "memory_eviction"
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MemoryEvictionConfig:
    """`lower_percent` None means `threshold_percent − 2` (not below 0)."""

    # evict BE when the node's memory working set is high
    enabled: bool = True
    # evict at or above this percent of node memory (working set)
    threshold_percent: float = validation.bounded(70.0, 1.0, 100.0)
    lower_percent: float | None = validation.bounded(None, 0.0, 100.0)
    # at most one eviction round per this many seconds
    cool_down_s: float = validation.bounded(4.0, 0.0, 3600.0)
    # a victim still there this long after its eviction counts as failed and may be chosen again
    pending_timeout_s: float = validation.bounded(120.0, 1.0, 3600.0)

    def __post_init__(self) -> None:
        p = "memory_eviction."
        validation.check_choices(self, "memory_eviction")
        validation.check_bounds(self, "memory_eviction")
        threshold, lower = self.threshold_percent, self.lower_percent
        if lower is not None and lower > threshold:
            raise ValueError(f"{p}lower_percent ({lower:g}) must be <= threshold_percent ({threshold:g})")

    @property
    def effective_lower_percent(self) -> float:
        if self.lower_percent is not None:
            return self.lower_percent
        return max(self.threshold_percent - 2, 0.0)


@dataclass(frozen=True, slots=True)
class MemoryEvictionState:
    last_round_at: float | None = None
    evicted: victims.EvictedLog = ()


def decide(
    snapshot: NodeSnapshot,
    config: MemoryEvictionConfig,
    state: MemoryEvictionState,
    *,
    failsafe: FailsafeConfig | None = None,
    pending_keys: Collection[str] = (),
) -> tuple[list[Action], MemoryEvictionState]:
    """`pending_keys`: workloads another policy evicts or evicted; they count as going, never as victims."""
    now = snapshot.taken_at
    evicted = victims.prune_evicted(snapshot, state.evicted, config.pending_timeout_s)
    new_state = replace(state, evicted=evicted)
    if not config.enabled:
        return [], new_state
    capacity = snapshot.capacity.memory_bytes
    used = snapshot.node_usage.memory_working_set_bytes
    if capacity <= 0 or used is None:
        missing = (
            "capacity.memory_bytes is 0" if capacity <= 0 else "missing node_usage.memory_working_set_bytes"
        )
        return [Hold(POLICY_NAME, HoldReason.MISSING_DATA, f"{missing}: cannot tell memory pressure")], \
            new_state
    percent = used * 100 / capacity
    if percent < config.threshold_percent:
        return [], new_state
    lower = config.effective_lower_percent
    going = victims.pending(snapshot, evicted, pending_keys)
    target_bytes = int(capacity * lower / 100)
    need = used - target_bytes - going.release.memory_bytes
    numbers: dict[str, float] = {
        "node_working_set_bytes": used,
        "capacity_memory_bytes": capacity,
        "usage_percent": percent,
        "threshold_percent": config.threshold_percent,
        "lower_percent": lower,
        "pending_bytes": going.release.memory_bytes,
        "pending_victims": len(going.keys),
        "need_bytes": need,
    }
    head = f"node working set {percent:.1f}% >= {config.threshold_percent:g}%"
    blocker = eviction_blocker(snapshot, failsafe or FailsafeConfig())
    if blocker is not None:
        return [Hold(POLICY_NAME, HoldReason.UNSAFE_DATA, f"{head} but data is unsafe: {blocker}")], new_state
    if need <= 0:
        if not going.keys:
            return [], new_state
        why = (
            f"{head}: {len(going.keys)} victim(s) still terminating will release "
            f"{going.release.memory_bytes / MIB:.1f} MiB, enough"
        )
        return [Hold(POLICY_NAME, HoldReason.VICTIMS_TERMINATING, why)], new_state
    last = state.last_round_at
    # A clock that went backwards ends the cool-down rather than stretching it; pending still guards.
    if last is not None and 0 <= now - last < config.cool_down_s:
        wait = config.cool_down_s - (now - last)
        return [Hold(POLICY_NAME, HoldReason.COOLDOWN, f"{head}: cool-down, {wait:.1f} s left")], new_state

    candidates = [w for w in snapshot.be_workloads if w.key not in going.keys]
    chosen, got = victims.pick_victims(candidates, 0, need)
    if not chosen:
        return [Hold(POLICY_NAME, HoldReason.NO_VICTIM, f"{head}: no BE victim with a known working set")], \
            new_state
    numbers["round_release_bytes"] = got.memory_bytes
    actions: list[Action] = []
    for w in chosen:
        r = victims.default_release(w)
        message = (
            f"{head}: releasing {need / MIB:.1f} MiB to reach {lower:g}%; {w.name} (priority {w.priority}) "
            f"holds {r.memory_bytes / MIB:.1f} MiB"
        )
        victim_numbers = dict(numbers, victim_priority=w.priority, victim_working_set_bytes=r.memory_bytes)
        actions.append(
            Evict(w.key, EvictReason.MEMORY_PRESSURE, message, r.milli_cpu, r.memory_bytes, victim_numbers)
        )
    return actions, MemoryEvictionState(
        last_round_at=now, evicted=victims.remember(evicted, (w.key for w in chosen), now)
    )


@dataclass(frozen=True, slots=True)
class MemoryEvictionPolicy(EvictionPolicy[MemoryEvictionState]):
    """Memory eviction behind the pipeline protocol; shares its victims with the other eviction policies."""

    config: MemoryEvictionConfig = field(default_factory=MemoryEvictionConfig)
    failsafe: FailsafeConfig = field(default_factory=FailsafeConfig)
    name: str = POLICY_NAME

    def initial_state(self) -> MemoryEvictionState:
        return MemoryEvictionState()

    def decide(self, snapshot: NodeSnapshot, state: MemoryEvictionState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], MemoryEvictionState]:
        return decide(snapshot, self.config, state, failsafe=self.failsafe, pending_keys=pending)
