"""BE CPU suppression: how much CPU the BE tier may have this tick, as a cpuset (default) or a CFS quota.

Formula (milli-cores): `formula = capacity × threshold% − hp_used − system_used`, then
`target = clamp(formula, floor, ceiling)`. The policy keeps its own `budget` (what it granted) and moves
it toward the target:

- shrink at once, by any amount: protecting HP comes first, so the dead-band never delays a cut;
- grow only when the target exceeds the budget by at least the dead-band (1 % of capacity), and by at
  most `max_grow_percent` (10 %) of capacity per tick. Noise in HP usage therefore costs at most one
  small cut per new low and never flaps;
- HP PSI (`cpu.pressure` some avg10 of the HP tier) above `psi_threshold_percent`: HP tasks are waiting
  for CPU whatever the usage figures say, so there is no growth, and while the pressure is not falling
  (not below the previous tick's reading) the budget is cut by one more step of `psi_shrink_percent` of
  capacity (at least one CPU under `cpuset`) each tick, down to the floor. Once the pressure falls the
  cut is working and the budget holds;
- missing usage (HP or system CPU unknown): hold the budget (no growth, no cut), say so with a `Hold`.
  Cutting BE to the floor on a metric glitch would punish BE for a collector problem and make it flap;
  not growing is what keeps HP safe, and PSI still cuts if HP really suffers. With no budget yet (first
  tick) nothing is written. A node with no HP workloads counts HP usage as 0 when it is missing;
- stale sources: the figures may be old, so a cut they call for is still made but nothing grows.

Policy `cpuset`: the BE tier gets `budget // 1000` whole CPUs (rounded down, so BE never gets more than
the formula allows; on a 2-CPU node at 65 % that is 1 CPU even with HP idle: 1300 → 1), at least
`min_cpus` (1 on a node of ≤ 2 CPUs; `min_milli_cpu` rounds up to whole CPUs), taken from the END of
`snapshot.cpus`: HP work and system daemons tend to sit on the low-numbered CPUs, and a source that lists
hyper-thread siblings next to each other makes this take whole physical cores first. Any CFS quota on
the BE tier is lifted, unless `cpuset_quota`: then the budget is kept in milli-cores as under `cfsQuota`
(floor `max(min_milli_cpu, 20)`, PSI steps of `psi_shrink_percent` of capacity, no whole-CPU step), the
cpuset is still `budget // 1000` CPUs (at least the minimum), and while the budget is below those CPUs
the BE tier also gets a CFS quota of the budget, lifted once the budget reaches them; BE then never gets
more than the formula allows (`granted_milli`: the lesser of the CPUs and the quota). It is off by
default because a quota lengthens HP's wake-up tail: on a quiet 2-CPU machine (`bench/interference.py`,
6 rounds, every window quiet) HP wake-up p99 was 0.98× HP alone under cpuset + `cpu.idle`, 2.11× under
`cfsQuota` and 1.85× under cpuset + quota (busy machines blur this: two noisy runs had cfsQuota at ~1.46×).
Policy `cfsQuota`: the BE tier gets a quota of `budget` milli-cores, at least 20 (2 ms per 100 ms
period), and every CPU in its cpuset.

`cpu.idle = 1` is asked for on the BE tier under both policies (once, and again whenever the snapshot
reads it back as 0) only where the agent laid the tier out itself: on a kubelet's tier the kernel would
refuse the kubelet's `cpu.shares` writes (docs/coexistence.md), so the runtime turns `cpu_idle` off there.
A knob that the snapshot reads back different from what the state says was granted (systemd or the
kubelet rewrote it) is re-asserted at the granted value, without re-ramping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from qos import validation
from qos.actions import Action, Hold, HoldReason, SetBeCpuIdle, SetBeCpuQuota, SetBeCpuset
from qos.model import NodeSnapshot
from qos.pipeline import Policy

POLICY_NAME = "cpu_suppression"
CPUSET: Literal["cpuset"] = "cpuset"
CFS_QUOTA: Literal["cfsQuota"] = "cfsQuota"
MIN_QUOTA_MILLI_CPU = 20
"""2000 µs per 100 ms period: koordlet's minimum, and low enough to starve BE almost completely."""


@dataclass(frozen=True, slots=True)
class SuppressionConfig:
    """BE CPU suppression (docs/suppression.md): how much CPU the BE tier may have each tick."""

    # suppress BE's CPU while HP needs it
    enabled: bool = True
    # how BE's CPU budget is held: the BE tier's cpuset (whole CPUs) or a CFS quota
    policy: Literal["cpuset", "cfsQuota"] = CPUSET
    # BE budget = capacity × this percent − HP used − system used
    threshold_percent: float = validation.bounded(65.0, 0.0, 100.0)
    # the budget's floor, in milli-CPU (rounded up to whole CPUs under cpuset)
    min_milli_cpu: int = validation.bounded(0, 0, 10**9)
    # under cpuset, BE keeps at least this many CPUs (1 on a node of ≤ 2 CPUs)
    min_cpus: int = validation.bounded(2, 1, 4096)
    # the budget grows by at most this percent of capacity a tick (it shrinks at once)
    max_grow_percent: float = validation.bounded(10.0, 1.0, 100.0)
    # the budget grows only when the target exceeds it by this percent of capacity
    dead_band_percent: float = validation.bounded(1.0, 0.0, 50.0)
    # cpu.idle = 1 on the BE tier, where the agent laid the tier out itself (cgroups.setup_tiers)
    cpu_idle: bool = True
    # HP CPU pressure (PSI some avg10) above this percent blocks growth and cuts the budget; null: PSI not
    # used
    psi_threshold_percent: float | None = validation.bounded(10.0, 0.0, 100.0)
    # each PSI cut takes this percent of capacity (at least a CPU under cpuset)
    psi_shrink_percent: float = validation.bounded(10.0, 1.0, 100.0)
    # under cpuset, also a CFS quota of the budget while it is below the whole CPUs given
    cpuset_quota: bool = False

    def __post_init__(self) -> None:
        p = "suppression."
        validation.check_choices(self, "suppression")
        validation.integer(p + "min_milli_cpu", self.min_milli_cpu)
        validation.integer(p + "min_cpus", self.min_cpus)
        validation.check_bounds(self, "suppression")


@dataclass(frozen=True, slots=True)
class SuppressionState:
    """What this policy granted: `budget_milli` is the truth; `cpuset`/`quota_milli` the knob it implies."""

    budget_milli: int | None = None
    cpuset: tuple[int, ...] | None = None
    quota_milli: int | None = None
    idle_requested: bool = False
    last_hp_psi: float | None = None


def effective_min_cpus(config: SuppressionConfig, ncpus: int) -> int:
    """`min_cpus`, but 1 on a node of 2 CPUs or fewer, and never more CPUs than the node has."""
    return min(1 if ncpus <= 2 else config.min_cpus, ncpus)


def quota_under_cpuset(config: SuppressionConfig) -> bool:
    """True when the `cpuset` policy also caps BE with a CFS quota below its whole CPUs (`cpuset_quota`)."""
    return config.policy == CPUSET and config.cpuset_quota


def _min_cpus(snapshot: NodeSnapshot, config: SuppressionConfig) -> int:
    # Whole CPUs: a configured minimum of 1500 milli-cores means 2 CPUs.
    return max(-(-config.min_milli_cpu // 1000), effective_min_cpus(config, len(snapshot.cpus)))


def bounds(snapshot: NodeSnapshot, config: SuppressionConfig) -> tuple[int, int]:
    """(floor, ceiling) of the BE budget in milli-cores under the configured policy."""
    if quota_under_cpuset(config):
        ceiling = len(snapshot.cpus) * 1000
        floor = max(config.min_milli_cpu, MIN_QUOTA_MILLI_CPU)
    elif config.policy == CPUSET:
        ceiling = len(snapshot.cpus) * 1000
        floor = _min_cpus(snapshot, config) * 1000
    else:
        ceiling = max(snapshot.capacity.milli_cpu, MIN_QUOTA_MILLI_CPU)
        floor = max(config.min_milli_cpu, MIN_QUOTA_MILLI_CPU)
    return min(floor, ceiling), ceiling


def _used(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return max(value, 0.0)


def formula_milli(snapshot: NodeSnapshot, config: SuppressionConfig) -> tuple[float | None, dict[str, float]]:
    """The unclamped BE allowance, or None when a usage figure it needs is missing; plus its inputs."""
    cap = snapshot.capacity.milli_cpu
    hp = _used(snapshot.hp_usage.milli_cpu)
    if hp is None and not snapshot.hp_workloads:
        hp = 0.0
    system = _used(snapshot.system_usage.milli_cpu)
    numbers: dict[str, float] = {"capacity_milli_cpu": cap, "threshold_percent": config.threshold_percent}
    if hp is not None:
        numbers["hp_used_milli_cpu"] = hp
    if system is not None:
        numbers["system_used_milli_cpu"] = system
    if hp is None or system is None:
        return None, numbers
    value = cap * config.threshold_percent / 100 - hp - system
    numbers["formula_milli_cpu"] = value
    return value, numbers


def _knob_budget(snapshot: NodeSnapshot, config: SuppressionConfig, ceiling: int) -> int:
    """What BE has now according to the knobs read back; unknown or unlimited reads as the ceiling."""
    quota = snapshot.be_tier.quota_milli_cpu
    if config.policy == CPUSET:
        cpus = len(snapshot.be_tier.cpuset) * 1000 if snapshot.be_tier.cpuset else ceiling
        return min(cpus, quota) if quota is not None and config.cpuset_quota else cpus
    return quota if quota is not None else ceiling


def _fmt_cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in cpus) or "-"


@dataclass(frozen=True, slots=True)
class _Pressure:
    """HP CPU pressure this tick: `high` forbids growth, `cut` (high and not falling) cuts one more step."""

    psi: float | None
    high: bool
    cut: bool


def _pressure(snapshot: NodeSnapshot, config: SuppressionConfig, state: SuppressionState) -> _Pressure:
    psi = snapshot.hp_cpu_pressure_some_avg10
    if psi is not None and not math.isfinite(psi):
        psi = None
    high = config.psi_threshold_percent is not None and psi is not None and psi > config.psi_threshold_percent
    cut = high and psi is not None and (state.last_hp_psi is None or psi >= state.last_hp_psi)
    return _Pressure(psi, high, cut)


def _idle(snapshot: NodeSnapshot, config: SuppressionConfig, state: SuppressionState) -> list[Action]:
    """Ask for `cpu.idle` once, and again whenever it reads back as 0."""
    if not config.cpu_idle or (state.idle_requested and snapshot.be_tier.cpu_idle is not False):
        return []
    why = "BE tier in SCHED_IDLE: HP preempts it at once"
    if state.idle_requested:
        why = "re-assert: BE tier cpu.idle read back as 0"
    return [SetBeCpuIdle(True, why)]


def _target(formula: float | None, current: int, floor: int, ceiling: int, cap: int,
            config: SuppressionConfig, pressure: _Pressure, actions: list[Action], reasons: list[str]) -> int:
    """Where the budget should go: the clamped formula (or `current` when it is unknown), less a PSI step."""
    if formula is None:
        target = current
        actions.append(
            Hold(POLICY_NAME, HoldReason.MISSING_DATA,
                 "missing HP or system CPU usage: holding the BE budget, not growing")
        )
    else:
        target = min(max(math.floor(formula), floor), ceiling)
    if pressure.cut:
        step = math.floor(cap * config.psi_shrink_percent / 100)
        if config.policy == CPUSET and not config.cpuset_quota:
            step = max(step, 1000)
        step = max(step, 1)
        if current - step < target:
            target = max(current - step, floor)
            reasons.append(
                f"HP cpu pressure {pressure.psi:.1f}% > {config.psi_threshold_percent:g}% and not falling"
            )
    return target


def _next_budget(snapshot: NodeSnapshot, config: SuppressionConfig, current: int, target: int, cap: int,
                 pressure: _Pressure, actions: list[Action], reasons: list[str]) -> int:
    """Shrink at once; grow past the dead-band by at most one step, unless stale data or PSI forbid it."""
    if target < current:
        reasons.insert(0, f"shrink at once {current} -> {target} milli-CPU")
        return target
    dead_band = max(math.floor(cap * config.dead_band_percent / 100), 1)
    if target - current < dead_band:
        return current
    blocked = []
    if snapshot.stale:
        blocked.append("stale sources: " + ", ".join(sorted(snapshot.stale)))
    if pressure.high:
        blocked.append(f"HP cpu pressure {pressure.psi:.1f}% > {config.psi_threshold_percent:g}%")
    if blocked:
        code = HoldReason.STALE_DATA if snapshot.stale else HoldReason.HP_CPU_PRESSURE
        actions.append(Hold(POLICY_NAME, code,
                            f"not growing BE to {target} milli-CPU: " + "; ".join(blocked)))
        return current
    grow_step = math.floor(cap * config.max_grow_percent / 100)
    budget = min(target, current + grow_step)
    reasons.insert(0, f"grow {current} -> {budget} milli-CPU (at most {grow_step} a tick)")
    return budget


def _cpuset_knobs(snapshot: NodeSnapshot, config: SuppressionConfig, state: SuppressionState, budget: int,
                  change: str, numbers: dict[str, float]) -> tuple[list[Action], tuple[int, ...]]:
    """The cpuset the budget buys (whole CPUs from the end); its quota knob is `_cpuset_quota`'s."""
    actions: list[Action] = []
    ncpus = min(max(budget // 1000, _min_cpus(snapshot, config)), len(snapshot.cpus))
    cpuset = tuple(sorted(snapshot.cpus[len(snapshot.cpus) - ncpus :]))
    numbers["be_cpus"] = ncpus
    seen = snapshot.be_tier.cpuset
    if state.cpuset != cpuset:
        why = change or ("initial BE cpuset" if state.cpuset is None else "BE cpuset follows the budget")
        actions.append(SetBeCpuset(cpuset, why, dict(numbers)))
    elif seen and set(seen) != set(cpuset):
        why = f"re-assert: BE cpuset read back as {_fmt_cpus(seen)}, granted {_fmt_cpus(cpuset)}"
        actions.append(SetBeCpuset(cpuset, why, dict(numbers)))
    return actions, cpuset


def _cpuset_quota(snapshot: NodeSnapshot, state: SuppressionState, quota: int | None, change: str,
                  numbers: dict[str, float]) -> list[Action]:
    """Under `cpuset`: the quota `cpuset_quota` asks for below the cpuset's whole CPUs, else none at all."""
    seen = snapshot.be_tier.quota_milli_cpu
    if quota is None:
        if state.quota_milli is not None:
            why = change or "BE budget reaches its cpuset's whole CPUs: quota lifted"
            return [SetBeCpuQuota(None, why, dict(numbers))]
        if seen is not None:
            why = f"re-assert: BE quota read back as {seen} milli-CPU, none granted under cpuset"
            return [SetBeCpuQuota(None, why, {"found_quota_milli_cpu": seen})]
        return []
    numbers["be_quota_milli_cpu"] = quota
    if state.quota_milli != quota:
        first = state.quota_milli is None
        why = change or ("BE quota below its cpuset" if first else "BE quota follows the budget")
        return [SetBeCpuQuota(quota, why, dict(numbers))]
    if seen is None or abs(seen - quota) > 1:
        found = "no quota" if seen is None else f"{seen} milli-CPU"
        why = f"re-assert: BE quota read back as {found}, granted {quota} milli-CPU"
        return [SetBeCpuQuota(quota, why, dict(numbers))]
    return []


def _quota_knobs(snapshot: NodeSnapshot, state: SuppressionState, quota: int, change: str,
                 numbers: dict[str, float]) -> list[Action]:
    """A CFS quota of the budget, and every CPU in the BE cpuset."""
    actions: list[Action] = []
    seen_quota = snapshot.be_tier.quota_milli_cpu
    if state.quota_milli != quota:
        why = change or ("initial BE quota" if state.quota_milli is None else "BE quota follows the budget")
        actions.append(SetBeCpuQuota(quota, why, dict(numbers)))
    elif seen_quota is None or abs(seen_quota - quota) > 1:
        found = "no quota" if seen_quota is None else f"{seen_quota} milli-CPU"
        why = f"re-assert: BE quota read back as {found}, granted {quota} milli-CPU"
        actions.append(SetBeCpuQuota(quota, why, dict(numbers)))
    all_cpus = tuple(sorted(snapshot.cpus))
    seen = snapshot.be_tier.cpuset
    if seen and all_cpus and set(seen) != set(all_cpus):
        why = f"cfsQuota policy: BE cpuset read back as {_fmt_cpus(seen)}, restoring every CPU"
        actions.append(SetBeCpuset(all_cpus, why, {"be_cpus": len(all_cpus)}))
    return actions


def decide(
    snapshot: NodeSnapshot, config: SuppressionConfig, state: SuppressionState
) -> tuple[list[Action], SuppressionState]:
    """This tick's BE CPU knobs (only those that change or need re-asserting) and the new grant."""
    if not config.enabled:
        return [], state
    actions = _idle(snapshot, config, state)
    pressure = _pressure(snapshot, config, state)
    new_state = replace(state, idle_requested=state.idle_requested or bool(actions), last_hp_psi=pressure.psi)

    if config.policy == CPUSET and not snapshot.cpus:
        actions.append(Hold(POLICY_NAME, HoldReason.NO_CPUS,
                            "the snapshot lists no CPUs: no cpuset to give the BE tier"))
        return actions, new_state

    floor, ceiling = bounds(snapshot, config)
    cap = max(snapshot.capacity.milli_cpu, 0)
    formula, numbers = formula_milli(snapshot, config)
    if formula is None and state.budget_milli is None and not pressure.cut:
        actions.append(
            Hold(POLICY_NAME, HoldReason.MISSING_DATA,
                 "missing HP or system CPU usage: nothing granted yet, BE left as is")
        )
        return actions, new_state

    current = state.budget_milli
    if current is None:
        current = _knob_budget(snapshot, config, ceiling)
    current = min(max(current, floor), ceiling)
    reasons: list[str] = []
    target = _target(formula, current, floor, ceiling, cap, config, pressure, actions, reasons)
    budget = _next_budget(snapshot, config, current, target, cap, pressure, actions, reasons)
    numbers.update(
        floor_milli_cpu=floor,
        target_milli_cpu=target,
        previous_budget_milli_cpu=current,
        budget_milli_cpu=budget,
    )
    if pressure.psi is not None:
        numbers["hp_cpu_psi_some_avg10"] = pressure.psi
    change = "; ".join(reasons)

    if config.policy == CPUSET:
        knobs, cpuset = _cpuset_knobs(snapshot, config, state, budget, change, numbers)
        quota = budget if config.cpuset_quota and budget < len(cpuset) * 1000 else None
        knobs += _cpuset_quota(snapshot, state, quota, change, numbers)
        return actions + knobs, replace(new_state, budget_milli=budget, cpuset=cpuset, quota_milli=quota)
    knobs = _quota_knobs(snapshot, state, budget, change, numbers)
    return actions + knobs, replace(new_state, budget_milli=budget, cpuset=None, quota_milli=budget)


def granted_milli(state: SuppressionState, config: SuppressionConfig) -> int | None:
    """What BE may use now: the budget, or under `cpuset_quota` the lesser of its whole CPUs and its quota."""
    if state.budget_milli is None or state.cpuset is None or not quota_under_cpuset(config):
        return state.budget_milli
    cpus = len(state.cpuset) * 1000
    return cpus if state.quota_milli is None else min(cpus, state.quota_milli)


@dataclass(frozen=True, slots=True)
class SuppressionPolicy(Policy[SuppressionState]):
    """CPU suppression behind the pipeline protocol; it evicts nothing."""

    config: SuppressionConfig = field(default_factory=SuppressionConfig)
    name: str = POLICY_NAME

    def initial_state(self) -> SuppressionState:
        return SuppressionState()

    def decide(self, snapshot: NodeSnapshot, state: SuppressionState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], SuppressionState]:
        return decide(snapshot, self.config, state)
