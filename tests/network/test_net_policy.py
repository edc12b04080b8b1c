"""The BE egress policy (`qos.network`) on hand-built snapshots: thresholds, hysteresis, hold time,
work-conserving mode, source reconciliation, and when it must not act. Pure: no kernel involved."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from kit.snapshot import node_snapshot

from qos.actions import Hold, SetBeEgressCeiling, SetBeEgressSources
from qos.model import NetworkSample, NodeSnapshot, Resources
from qos.network import NetworkPolicy, NetworkPolicyConfig, NetworkState, decide
from qos.policies import PolicyConfig
from qos.registry import build_pipeline

LINK = 400_000_000  # 400 Mbit/s
LOW, HIGH = LINK // 10, LINK * 4 // 10


def snap(hp: float | None, be: float | None = 0.0, *, t: float = 100.0, ceil: int | None = LOW,
         rate: int | None = LOW, owned: bool = True, age: float = 0.1, want: frozenset[str] = frozenset(),
         have: frozenset[str] = frozenset(), interval: float = 1.0) -> NodeSnapshot:
    net = NetworkSample(link_bps=LINK, hp_bps=hp, be_bps=be, be_ceil_bps=ceil, be_rate_bps=rate, owned=owned,
                        root="ours htb c01c:0", be_addresses=want, classified=have, age_s=age)
    return node_snapshot(taken_at=t, capacity=Resources(2000, 1 << 30), cpus=(0, 1), interval_s=interval,
                         network=net)


def ceilings(actions: list[object]) -> list[int]:
    return [a.ceil_bps for a in actions if isinstance(a, SetBeEgressCeiling)]


def test_hp_at_the_watermark_cuts_be_to_the_low_share_at_once() -> None:
    cfg = NetworkPolicyConfig()
    state = NetworkState(ceil_bps=HIGH, changed_at=99.9)  # changed 0.1 s ago: a cut does not wait
    acts, state = decide(snap(0.80 * LINK, ceil=HIGH), cfg, state)
    assert ceilings(acts) == [LOW]
    assert state.ceil_bps == LOW and state.changed_at == 100.0
    (a,) = [x for x in acts if isinstance(x, SetBeEgressCeiling)]
    assert a.rate_bps == LOW  # the low share is BE's guaranteed rate


def test_hp_just_below_the_watermark_does_not_cut() -> None:
    acts, state = decide(snap(0.79 * LINK, ceil=HIGH), NetworkPolicyConfig(), NetworkState(HIGH, 0.0))
    assert ceilings(acts) == [] and state.ceil_bps == HIGH


def test_hp_idle_raises_to_the_high_share_once_the_hold_has_passed() -> None:
    cfg = NetworkPolicyConfig(hold_s=2.0)
    acts, state = decide(snap(0.0, t=101.0), cfg, NetworkState(LOW, 100.0))
    assert ceilings(acts) == []
    assert any(isinstance(a, Hold) and "hold_s" in a.reason for a in acts)
    acts, state = decide(snap(0.0, t=102.0), cfg, state)
    assert ceilings(acts) == [HIGH] and state.changed_at == 102.0


def test_hysteresis_band_keeps_the_ceiling_either_way() -> None:
    cfg = NetworkPolicyConfig(watermark_percent=80, hysteresis_percent=10, hold_s=0)
    for current in (LOW, HIGH):
        acts, state = decide(snap(0.75 * LINK, ceil=current), cfg, NetworkState(current, 0.0))
        assert ceilings(acts) == [] and state.ceil_bps == current
    acts, _ = decide(snap(0.69 * LINK), cfg, NetworkState(LOW, 0.0))
    assert ceilings(acts) == [HIGH]


def test_no_flapping_faster_than_the_hold_under_alternating_load() -> None:
    """HP alternates busy/idle every tick for 20 s: the ceiling goes up at most once per hold_s."""
    cfg = NetworkPolicyConfig(hold_s=3.0)
    state = NetworkState()
    raises: list[float] = []
    for i in range(20):
        t = 100.0 + i
        hp = 0.9 * LINK if i % 2 == 0 else 0.0
        acts, state = decide(snap(hp, t=t, ceil=state.ceil_bps or LOW), cfg, state)
        raises += [t for c in ceilings(acts) if c == HIGH]
    assert raises, "BE was never raised at all"
    assert all(b - a >= cfg.hold_s for a, b in itertools.pairwise(raises))


def test_work_conserving_gives_be_what_hp_leaves_minus_headroom() -> None:
    cfg = NetworkPolicyConfig(mode="work-conserving", headroom_percent=5, dead_band_percent=5, hold_s=0)
    acts, _ = decide(snap(0.0, ceil=LOW), cfg, NetworkState(LOW, 0.0))
    assert ceilings(acts) == [LINK * 95 // 100]
    acts, _ = decide(snap(0.50 * LINK, ceil=LINK * 95 // 100), cfg, NetworkState(LINK * 95 // 100, 0.0))
    assert ceilings(acts) == [LINK * 45 // 100]
    acts, _ = decide(snap(0.99 * LINK, ceil=LINK * 45 // 100), cfg, NetworkState(LINK * 45 // 100, 0.0))
    assert ceilings(acts) == [LOW]  # never below the low share
    acts, _ = decide(snap(0.48 * LINK, ceil=LINK * 45 // 100), cfg, NetworkState(LINK * 45 // 100, 0.0))
    assert ceilings(acts) == []  # a 2 % move is inside the dead band


def test_first_reading_starts_from_what_the_kernel_holds() -> None:
    acts, state = decide(snap(0.0, ceil=LOW), NetworkPolicyConfig(), NetworkState())
    assert ceilings(acts) == [HIGH] and state.ceil_bps == HIGH


def test_a_ceiling_changed_behind_our_back_is_re_asserted() -> None:
    acts, _ = decide(snap(0.0, ceil=LINK), NetworkPolicyConfig(), NetworkState(HIGH, 0.0))
    (a,) = [x for x in acts if isinstance(x, SetBeEgressCeiling)]
    assert a.ceil_bps == HIGH and a.reason.startswith("re-assert")


@pytest.mark.parametrize("kw, why", [
    ({"owned": False}, "not ours"),
    ({"age": 5.0}, "old"),
])
def test_no_ceiling_change_on_a_foreign_root_or_a_stale_reading(kw: dict[str, object], why: str) -> None:
    acts, state = decide(snap(0.95 * LINK, ceil=HIGH, **kw), NetworkPolicyConfig(),  # type: ignore[arg-type]
                         NetworkState(HIGH, 0.0))
    assert ceilings(acts) == [] and state.ceil_bps == HIGH
    assert any(isinstance(a, Hold) and why in a.reason for a in acts)


def test_no_rates_yet_holds_but_still_reconciles_sources() -> None:
    acts, _ = decide(snap(None, None, want=frozenset({"10.0.0.2"})), NetworkPolicyConfig(), NetworkState())
    assert ceilings(acts) == []
    assert [a.addresses for a in acts if isinstance(a, SetBeEgressSources)] == [frozenset({"10.0.0.2"})]


def test_sources_follow_the_be_pods() -> None:
    want = frozenset({"10.0.0.2", "fd00::2"})
    acts, _ = decide(snap(0.0, ceil=HIGH, want=want, have=frozenset({"10.0.0.9"})), NetworkPolicyConfig(),
                     NetworkState(HIGH, 0.0))
    (a,) = [x for x in acts if isinstance(x, SetBeEgressSources)]
    assert a.addresses == want
    assert "add 10.0.0.2, fd00::2" in a.reason and "remove 10.0.0.9" in a.reason
    acts, _ = decide(snap(0.0, ceil=HIGH, want=want, have=want), NetworkPolicyConfig(),
                     NetworkState(HIGH, 0.0))
    assert not [x for x in acts if isinstance(x, SetBeEgressSources)]


def test_no_network_sample_no_action() -> None:
    s = dataclasses.replace(snap(0.9 * LINK), network=None)
    assert decide(s, NetworkPolicyConfig(), NetworkState()) == ([], NetworkState())


@pytest.mark.parametrize("kw, field", [
    ({"mode": "fast"}, "mode"),
    ({"low_share_percent": 50, "high_share_percent": 40}, "low_share_percent"),
    ({"watermark_percent": 0}, "watermark_percent"),
    ({"hold_s": -1}, "hold_s"),
    ({"hysteresis_percent": 90, "watermark_percent": 80}, "hysteresis_percent"),
])
def test_bad_config_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"network.policy.{field}"):
        NetworkPolicyConfig(**kw)  # type: ignore[arg-type]


def test_registered_only_when_configured() -> None:
    assert "network" not in [p.name for p in build_pipeline(PolicyConfig()).policies]
    pipe = build_pipeline(PolicyConfig(), network=NetworkPolicyConfig())
    assert isinstance(pipe.policy("network"), NetworkPolicy)
    actions, _ = pipe.decide(snap(0.0, ceil=LOW), pipe.initial_state())
    assert ceilings(actions) == [HIGH]
