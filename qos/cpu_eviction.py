"""BE CPU eviction by satisfaction: evict BE when the CPU it is allowed falls far below what it requested.

`sat = be_real_limit / be_request`, where the real limit is what the BE tier's knobs allow
(min(|cpuset| × 1000, quota), read back in the snapshot, at most the node's capacity) and the request
is the sum of CPU requests of BE workloads not already on their way out. When, over `window_s` (the
samples kept in the state, dated by snapshot time), every sample shows BE busy (usage ≥
`be_usage_threshold_percent` of its limit, or a limit under one CPU) and `sat ≤ lower%`, release
`be_request × (upper% − sat)` milli-cores of requests, with `sat` the larger of the window average and the
last sample (the smaller release). Defaults follow koordlet's documented example (lower 60 %, upper
80 %, busy at 90 %, cool-down 20 s). After a round the window starts afresh: new evidence is needed.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from qos import validation, victims
from qos.actions import Action, Evict, EvictReason, Hold, HoldReason
from qos.eviction import EvictionPolicy
from qos.failsafe import FailsafeConfig, eviction_blocker
from qos.model import NodeSnapshot

POLICY_NAME = "cpu_eviction"


@dataclass(frozen=True, slots=True)
class CpuEvictionConfig:
    """BE CPU eviction by satisfaction: evict BE when the CPU it is allowed falls far below what it requested
    (koordlet's defaults)."""

    # evict BE when the CPU it is allowed falls far below what it requested
    enabled: bool = True
    # evict when BE's satisfaction (allowed CPU / requested) is at or below this percent over the window
    satisfaction_lower_percent: float = validation.bounded(60.0, 1.0, 100.0)
    # release requests until satisfaction would reach this percent
    satisfaction_upper_percent: float = validation.bounded(80.0, 1.0, 100.0)
    # BE counts as busy when it uses this percent of its limit; only busy BE is evicted for satisfaction
    be_usage_threshold_percent: float = validation.bounded(90.0, 0.0, 100.0)
    # how long every sample must show busy, unsatisfied BE
    window_s: float = validation.bounded(10.0, 0.1, 3600.0)
    # at most one eviction round per this many seconds
    cool_down_s: float = validation.bounded(20.0, 0.0, 3600.0)
    # a victim still there this long after its eviction counts as failed and may be chosen again
    pending_timeout_s: float = validation.bounded(120.0, 1.0, 3600.0)

    def __post_init__(self) -> None:
        p = "cpu_eviction."
        validation.check_choices(self, "cpu_eviction")
        validation.check_bounds(self, "cpu_eviction")
        lower, upper = self.satisfaction_lower_percent, self.satisfaction_upper_percent
        if upper < lower:
            raise ValueError(
                f"{p}satisfaction_upper_percent ({upper:g}) must be >= satisfaction_lower_percent ({lower:g})"
            )


@dataclass(frozen=True, slots=True)
class CpuSample:
    at: float
    be_usage_milli: float
    be_limit_milli: int
    be_request_milli: int


@dataclass(frozen=True, slots=True)
class CpuEvictionState:
    samples: tuple[CpuSample, ...] = ()
    last_round_at: float | None = None
    evicted: victims.EvictedLog = ()


def be_real_limit(snapshot: NodeSnapshot) -> int:
    """Milli-cores the BE tier may use now: min(|cpuset| × 1000, quota, capacity); unknown knobs don't cap."""
    limits = []
    if snapshot.be_tier.cpuset:
        limits.append(len(snapshot.be_tier.cpuset) * 1000)
    if snapshot.be_tier.quota_milli_cpu is not None:
        limits.append(max(snapshot.be_tier.quota_milli_cpu, 0))
    if snapshot.capacity.milli_cpu > 0:
        limits.append(snapshot.capacity.milli_cpu)
    elif snapshot.cpus:
        limits.append(len(snapshot.cpus) * 1000)
    return min(limits) if limits else 0


def _busy(s: CpuSample, config: CpuEvictionConfig) -> bool:
    return (
        s.be_limit_milli < 1000
        or s.be_usage_milli >= s.be_limit_milli * config.be_usage_threshold_percent / 100
    )


def _sat(limit: float, request: float) -> float:
    return limit / request if request > 0 else math.inf


def _starved(s: CpuSample, config: CpuEvictionConfig) -> bool:
    return (
        _busy(s, config)
        and _sat(s.be_limit_milli, s.be_request_milli) <= config.satisfaction_lower_percent / 100
    )


def decide(
    snapshot: NodeSnapshot,
    config: CpuEvictionConfig,
    state: CpuEvictionState,
    *,
    failsafe: FailsafeConfig | None = None,
    pending_keys: Collection[str] = (),
) -> tuple[list[Action], CpuEvictionState]:
    """`pending_keys`: workloads another policy evicts or evicted; they count as going, never as victims."""
    now = snapshot.taken_at
    evicted = victims.prune_evicted(snapshot, state.evicted, config.pending_timeout_s)
    new_state = replace(state, evicted=evicted)
    if not config.enabled:
        return [], new_state
    going = victims.pending(snapshot, evicted, pending_keys)
    request = sum(max(w.requests.milli_cpu, 0) for w in snapshot.be_workloads if w.key not in going.keys)
    usage = snapshot.be_usage.milli_cpu
    if request <= 0:
        return [], replace(new_state, samples=())
    if usage is None or not math.isfinite(usage):
        return [Hold(POLICY_NAME, HoldReason.MISSING_DATA,
                     "missing be_usage.milli_cpu: no BE CPU evidence this tick")], new_state
    sample = CpuSample(now, usage, be_real_limit(snapshot), request)
    blocker = eviction_blocker(snapshot, failsafe or FailsafeConfig())
    if blocker is not None:
        # Stale figures are not evidence: keep the window as it was.
        if _starved(sample, config):
            return [Hold(POLICY_NAME, HoldReason.UNSAFE_DATA,
                         f"BE CPU looks starved but data is unsafe: {blocker}")], new_state
        return [], new_state

    window = (*(s for s in state.samples if now - config.window_s < s.at < now), sample)
    new_state = replace(new_state, samples=window)
    interval = max(snapshot.interval_s, 0.0)
    covered = (
        now - window[0].at >= config.window_s - interval and len(window) * interval >= config.window_s / 3
    )
    if not (covered and all(_starved(s, config) for s in window)):
        return [], new_state

    avg_sat = _sat(sum(s.be_limit_milli for s in window), sum(s.be_request_milli for s in window))
    sat = max(avg_sat, _sat(sample.be_limit_milli, sample.be_request_milli))
    # Rounded before the ceiling so float noise (4000 × 0.3 = 1200.0000000000002) does not add a milli-core.
    need = math.ceil(round(request * (config.satisfaction_upper_percent / 100 - sat), 6))
    numbers: dict[str, float] = {
        "be_request_milli_cpu": request,
        "be_real_limit_milli_cpu": sample.be_limit_milli,
        "be_usage_milli_cpu": usage,
        "satisfaction": sat,
        "satisfaction_lower_percent": config.satisfaction_lower_percent,
        "satisfaction_upper_percent": config.satisfaction_upper_percent,
        "window_samples": len(window),
        "need_milli_cpu": need,
        "pending_milli_cpu": going.release.milli_cpu,
    }
    if need <= 0:
        return [], new_state
    last = state.last_round_at
    if last is not None and 0 <= now - last < config.cool_down_s:
        wait = config.cool_down_s - (now - last)
        return [Hold(POLICY_NAME, HoldReason.COOLDOWN,
                     f"BE CPU satisfaction {sat:.2f}: cool-down, {wait:.1f} s left")], new_state

    candidates = [w for w in snapshot.be_workloads if w.key not in going.keys]
    chosen, got = victims.pick_victims(candidates, need, 0)
    if not chosen:
        return [
            Hold(POLICY_NAME, HoldReason.NO_VICTIM,
                 f"BE CPU satisfaction {sat:.2f}: no BE victim with a CPU request")
        ], new_state
    numbers["round_release_milli_cpu"] = got.milli_cpu
    actions: list[Action] = []
    for w in chosen:
        r = victims.default_release(w)
        message = (
            f"BE CPU satisfaction {sat:.2f} <= {config.satisfaction_lower_percent:g}% "
            f"for {config.window_s:g} s while busy: releasing {need} milli-CPU of requests; "
            f"{w.name} (priority {w.priority}) requests {r.milli_cpu}"
        )
        victim_numbers = dict(numbers, victim_priority=w.priority, victim_request_milli_cpu=r.milli_cpu)
        actions.append(
            Evict(w.key, EvictReason.CPU_SATISFACTION, message, r.milli_cpu, r.memory_bytes, victim_numbers)
        )
    return actions, CpuEvictionState(
        samples=(),
        last_round_at=now,
        evicted=victims.remember(evicted, (w.key for w in chosen), now),
    )


@dataclass(frozen=True, slots=True)
class CpuEvictionPolicy(EvictionPolicy[CpuEvictionState]):
    """CPU eviction behind the pipeline protocol; shares its victims with the other eviction policies."""

    config: CpuEvictionConfig = field(default_factory=CpuEvictionConfig)
    failsafe: FailsafeConfig = field(default_factory=FailsafeConfig)
    name: str = POLICY_NAME

    def initial_state(self) -> CpuEvictionState:
        return CpuEvictionState()

    def decide(self, snapshot: NodeSnapshot, state: CpuEvictionState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], CpuEvictionState]:
        return decide(snapshot, self.config, state, failsafe=self.failsafe, pending_keys=pending)
