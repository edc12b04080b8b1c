"""BE egress bandwidth: how much of the node's link the BE class may use, from the last interval's rates.

Inputs (`NodeSnapshot.network`): the link capacity (configured, never guessed from a device), the HP and BE
classes' measured egress rates, and the BE class as the kernel holds it. Two modes:

- `threshold` (default): HP at or above `watermark_percent` of the link ⇒ BE ceiling `low_share_percent`;
  HP below `watermark_percent − hysteresis_percent` ⇒ `high_share_percent`; in between the ceiling stays.
- `work-conserving`: BE may use what HP leaves, minus `headroom_percent` of the link, never less than the
  low share; moves smaller than `dead_band_percent` of the link are not made.

Flapping: a cut (protecting HP) is made at once; a raise only once `hold_s` has passed since the last
change, so the ceiling cannot go down and up again faster than that.

The low share is BE's *guaranteed rate* as well as its cap under HP pressure: the BE class always gets
`rate = low share` (the HP class `link − low share`), and only its ceiling moves. With both saturating, HP
keeps `100 − low` percent of the link and BE its low share; BE's control traffic (TCP ACKs, neighbour
discovery from BE addresses) is never starved to a trickle, which a 1 % floor did on the measured kernel.

BE pods' source addresses are reconciled too: when the addresses the kernel's filters match differ from
those of the BE workloads in the snapshot, a `SetBeEgressSources` carries the wanted set.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from qos import validation
from qos.actions import Action, Hold, HoldReason, SetBeEgressCeiling, SetBeEgressSources
from qos.model import NetworkSample, NodeSnapshot
from qos.pipeline import Policy

POLICY_NAME = "network"
THRESHOLD: Literal["threshold"] = "threshold"
WORK_CONSERVING: Literal["work-conserving"] = "work-conserving"
STALE_INTERVALS = 3.0
"""A reading older than this many loop intervals is not acted on."""


@dataclass(frozen=True, slots=True)
class NetworkPolicyConfig:
    """BE's egress ceiling from HP's and BE's rates (docs/network.md)."""

    # threshold: BE's ceiling steps between two shares; work-conserving: BE may use what HP leaves
    mode: Literal["threshold", "work-conserving"] = THRESHOLD
    # threshold mode: HP at or above this percent of the link cuts BE to the low share
    watermark_percent: float = validation.bounded(80.0, 1.0, 100.0)
    # BE's ceiling under HP pressure, and its guaranteed rate, as a percent of the link
    low_share_percent: float = validation.bounded(10.0, 1.0, 100.0)
    # threshold mode: BE's ceiling while HP is below the watermark minus the hysteresis
    high_share_percent: float = validation.bounded(40.0, 1.0, 100.0)
    # threshold mode: HP must fall this far below the watermark before BE is raised
    hysteresis_percent: float = validation.bounded(10.0, 0.0, 100.0)
    # a raise only once this long has passed since the last change (a cut is made at once)
    hold_s: float = validation.bounded(2.0, 0.0, 3600.0)
    # work-conserving mode: BE gets what HP leaves minus this percent of the link
    headroom_percent: float = validation.bounded(5.0, 0.0, 50.0)
    # work-conserving mode: moves smaller than this percent of the link are not made
    dead_band_percent: float = validation.bounded(5.0, 0.0, 50.0)

    def __post_init__(self) -> None:
        p = "network.policy."
        validation.check_choices(self, "network.policy")
        validation.check_bounds(self, "network.policy")
        if self.low_share_percent > self.high_share_percent:
            raise ValueError(f"{p}low_share_percent must be <= high_share_percent, got "
                             f"{self.low_share_percent:g} > {self.high_share_percent:g}")
        if self.hysteresis_percent > self.watermark_percent:
            raise ValueError(f"{p}hysteresis_percent must be <= watermark_percent, got "
                             f"{self.hysteresis_percent:g} > {self.watermark_percent:g}")


@dataclass(frozen=True, slots=True)
class NetworkState:
    """What this policy last asked for, and when (snapshot time)."""

    ceil_bps: int | None = None
    changed_at: float | None = None


def _share(link_bps: int, percent: float) -> int:
    """`percent` of the link in bits/s, a whole number of bytes (the kernel keeps HTB rates in bytes/s)."""
    return int(link_bps * percent / 100) // 8 * 8


def _differs(seen: int | None, want: int) -> bool:
    """The kernel's value is not what was asked for (beyond its rounding)."""
    return seen is None or abs(seen - want) > max(64, want // 100)


def target_ceiling(net: NetworkSample, hp_bps: float, config: NetworkPolicyConfig,
                   current: int | None) -> tuple[int, str]:
    """Where the BE ceiling should be for this HP rate (bits/s), and why."""
    link = net.link_bps
    low, high = _share(link, config.low_share_percent), _share(link, config.high_share_percent)
    hp_pct = 100.0 * hp_bps / link
    if config.mode == WORK_CONSERVING:
        top = link - _share(link, config.headroom_percent)
        left = (int(link - hp_bps) - _share(link, config.headroom_percent)) // 8 * 8
        return max(low, min(top, left)), f"work-conserving: HP {hp_pct:.1f}% of the link, BE gets the rest"
    if hp_pct >= config.watermark_percent:
        return low, f"HP {hp_pct:.1f}% >= watermark {config.watermark_percent:g}%"
    if hp_pct < config.watermark_percent - config.hysteresis_percent:
        return high, f"HP {hp_pct:.1f}% < {config.watermark_percent - config.hysteresis_percent:g}%"
    keep = current if current is not None else low
    return keep, f"HP {hp_pct:.1f}% within the hysteresis band: ceiling kept"


def _sources(net: NetworkSample) -> list[Action]:
    if net.be_addresses == net.classified:
        return []
    add = sorted(net.be_addresses - net.classified)
    drop = sorted(net.classified - net.be_addresses)
    why = "BE sources: " + "; ".join(x for x in (
        f"add {', '.join(add)}" if add else "", f"remove {', '.join(drop)}" if drop else "") if x)
    return [SetBeEgressSources(net.be_addresses, why)]


def _readable(snapshot: NodeSnapshot, net: NetworkSample) -> Hold | None:
    """Why this reading cannot drive the ceiling, or None."""
    if not net.owned:
        return Hold(POLICY_NAME, HoldReason.QDISC_NOT_OURS,
                    f"the egress root qdisc is not ours ({net.root or 'unknown'}): not shaping")
    if net.hp_bps is None or net.be_bps is None:
        return Hold(POLICY_NAME, HoldReason.MISSING_DATA, "no egress rates yet (one reading so far)")
    if net.age_s > STALE_INTERVALS * snapshot.interval_s:
        return Hold(POLICY_NAME, HoldReason.STALE_DATA,
                    f"egress reading is {net.age_s:.1f}s old: holding the BE ceiling")
    return None


def decide(snapshot: NodeSnapshot, config: NetworkPolicyConfig,
           state: NetworkState) -> tuple[list[Action], NetworkState]:
    """This tick's BE egress actions (only those that change or need re-asserting) and the new state."""
    net = snapshot.network
    if net is None:
        return [], state
    why_not = _readable(snapshot, net)
    if why_not is not None and not net.owned:
        return [why_not], state
    actions = _sources(net)
    if why_not is not None:
        return [*actions, why_not], state
    assert net.hp_bps is not None and net.be_bps is not None
    link = net.link_bps
    rate = _share(link, config.low_share_percent)
    current = state.ceil_bps if state.ceil_bps is not None else net.be_ceil_bps
    target, why = target_ceiling(net, net.hp_bps, config, current)
    numbers = {"link_bps": link, "hp_bps": net.hp_bps, "be_bps": net.be_bps, "target_ceil_bps": target,
               "be_rate_bps": rate}
    new = _next(snapshot.taken_at, config, state, current, target, link)
    if isinstance(new, Hold):
        return [*actions, new], state
    if new is not None:
        numbers["previous_ceil_bps"] = current if current is not None else -1
        actions.append(SetBeEgressCeiling(new, rate, why, numbers))
        return actions, replace(state, ceil_bps=new, changed_at=snapshot.taken_at)
    if state.ceil_bps is not None and (_differs(net.be_ceil_bps, state.ceil_bps)
                                       or _differs(net.be_rate_bps, rate)):
        found = f"ceil {net.be_ceil_bps} rate {net.be_rate_bps}"
        actions.append(SetBeEgressCeiling(state.ceil_bps, rate,
                                          f"re-assert: BE class read back as {found}", numbers))
    elif state.ceil_bps is None and current is not None:
        state = replace(state, ceil_bps=current)
    return actions, state


def _next(now: float, config: NetworkPolicyConfig, state: NetworkState, current: int | None, target: int,
          link: int) -> int | Hold | None:
    """The ceiling to set now (None: keep it), or a Hold when a raise must wait for the hold time."""
    if current is None:
        return target
    if config.mode == WORK_CONSERVING and abs(target - current) < _share(link, config.dead_band_percent):
        return None
    if target < current:
        return target
    if target == current:
        return None
    waited = None if state.changed_at is None else now - state.changed_at
    if waited is not None and waited < config.hold_s:
        return Hold(POLICY_NAME, HoldReason.HOLD_TIME, f"raising the BE egress ceiling waits for hold_s "
                                 f"({waited:.1f}s of {config.hold_s:g}s since the last change)")
    return target


@dataclass(frozen=True, slots=True)
class NetworkPolicy(Policy[NetworkState]):
    """BE egress bandwidth behind the pipeline protocol; it evicts nothing and acts only on a reading."""

    config: NetworkPolicyConfig = field(default_factory=NetworkPolicyConfig)
    name: str = POLICY_NAME

    def initial_state(self) -> NetworkState:
        return NetworkState()

    def decide(self, snapshot: NodeSnapshot, state: NetworkState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], NetworkState]:
        return decide(snapshot, self.config, state)
