"""Every numeric setting of the config sections that live in qos/ has a declared range
(`qos.validation.bounded`): the loader takes its ends and refuses one step beyond, in one line naming the
key, the range and the value; a NodeSLO value beyond it is refused too and the settings in force are kept."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config.agent import load_config
from agent.config.load import ConfigError
from agent.config.sources import NodeSloConfig
from agent.sources.nodeslo import NodeSloSource
from agent.sources.nodeslo_map import ResourceQos
from agent.sources.settings import SettingsInForce
from qos.batch import BatchConfig
from qos.cpu_burst import CpuBurstSettings
from qos.cpu_eviction import CpuEvictionConfig
from qos.failsafe import FailsafeConfig
from qos.memory_eviction import MemoryEvictionConfig
from qos.memory_qos import MemoryQosSettings
from qos.model import Resources
from qos.network import NetworkPolicyConfig
from qos.policies import PolicyConfig
from qos.protection import ProtectionConfig
from qos.suppression import SuppressionConfig
from qos.validation import Bounds, bounds_of

SECTIONS: dict[str, type] = {
    "batch": BatchConfig, "policies.suppression": SuppressionConfig,
    "policies.cpu_eviction": CpuEvictionConfig, "policies.memory_eviction": MemoryEvictionConfig,
    "policies.failsafe": FailsafeConfig, "protection": ProtectionConfig,
    "network.policy": NetworkPolicyConfig,
}
# Settings another one of the same section must agree with, at one end of its range.
COMPANIONS: dict[tuple[str, str, str], dict[str, object]] = {
    ("policies.cpu_eviction", "satisfaction_lower_percent", "high"): {"satisfaction_upper_percent": 100},
    ("policies.cpu_eviction", "satisfaction_upper_percent", "low"): {"satisfaction_lower_percent": 1},
    ("policies.memory_eviction", "lower_percent", "high"): {"threshold_percent": 100},
    ("network.policy", "low_share_percent", "high"): {"high_share_percent": 100},
    ("network.policy", "high_share_percent", "low"): {"low_share_percent": 1},
    ("network.policy", "watermark_percent", "low"): {"hysteresis_percent": 1},
    ("network.policy", "hysteresis_percent", "high"): {"watermark_percent": 100},
}


def _numeric(tp: Any) -> type | None:
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    kinds = [a for a in args if a in (int, float)]
    return kinds[0] if kinds else None


def numeric_fields() -> list[tuple[str, str, type, Bounds | None]]:
    out = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        declared = bounds_of(cls)
        for f in dataclasses.fields(cls):
            kind = _numeric(hints[f.name])
            if kind is not None:
                out.append((section, f.name, kind, declared.get(f.name)))
    return out


FIELDS = numeric_fields()
IDS = [f"{s}.{n}" for s, n, _, _ in FIELDS]


def load(tmp_path: Path, section: str, values: dict[str, object]) -> object:
    data: dict[str, Any] = {}
    node = data
    for part in section.split("."):
        node = node.setdefault(part, {})
    node.update(values)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_the_sections_have_numeric_fields() -> None:
    assert len(FIELDS) == 37, [f"{s}.{n}" for s, n, _, _ in FIELDS]  # a new one joins the tests below


@pytest.mark.parametrize(("section", "name", "kind", "bounds"), FIELDS, ids=IDS)
def test_every_numeric_field_declares_a_range_holding_its_default(section: str, name: str, kind: type,
                                                                   bounds: Bounds | None) -> None:
    assert bounds is not None, f"{section}.{name} declares no range (qos.validation.bounded)"
    assert bounds.low < bounds.high and all(isinstance(b, kind) for b in (bounds.low, bounds.high))
    default = getattr(SECTIONS[section](), name)
    assert default is None or bounds.low <= default <= bounds.high


@pytest.mark.parametrize(("section", "name", "kind", "bounds"), FIELDS, ids=IDS)
@pytest.mark.parametrize("end", ["low", "high"])
def test_each_end_is_taken(tmp_path: Path, section: str, name: str, kind: type, bounds: Bounds,
                           end: str) -> None:
    value = getattr(bounds, end)
    cfg = load(tmp_path, section, {name: value, **COMPANIONS.get((section, name, end), {})})
    obj: Any = cfg
    for part in section.split("."):
        obj = getattr(obj, part)
    assert getattr(obj, name) == value


def _beyond(bounds: Bounds, kind: type) -> list[int | float]:
    out: list[int | float] = [bounds.low - 1, bounds.high + 1]
    if kind is float:  # the nearest floats outside, not just a whole unit
        out += [math.nextafter(bounds.low, -math.inf), math.nextafter(bounds.high, math.inf)]
    return out


@pytest.mark.parametrize(("section", "name", "kind", "bounds"), FIELDS, ids=IDS)
def test_one_step_beyond_either_end_is_refused_in_one_line(tmp_path: Path, section: str, name: str,
                                                           kind: type, bounds: Bounds) -> None:
    for value in _beyond(bounds, kind):
        with pytest.raises(ConfigError) as err:
            load(tmp_path, section, {name: value})
        msg = str(err.value)
        assert "\n" not in msg
        assert f"{section}.{name}: must be in {bounds}, got" in msg, msg


def test_a_huge_value_is_shown_as_a_short_prefix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, "batch", {"reserved_milli_cpu": 10**3000})
    assert len(str(err.value)) < 250, str(err.value)


# ---- the NodeSLO path ----------------------------------------------------------------------------------


class _Seen(SettingsInForce):
    """The settings in force, each change put in force kept in `seen`."""

    def __init__(self, base: PolicyConfig) -> None:
        super().__init__(base, ResourceQos(MemoryQosSettings(), CpuBurstSettings()), nodeslo=True)
        self.seen: list[PolicyConfig] = []

    def use(self, policies: PolicyConfig, sources: Mapping[str, str]) -> None:
        super().use(policies, sources)
        self.seen.append(policies)


def _source(base: PolicyConfig) -> tuple[NodeSloSource, list[PolicyConfig]]:
    from kubernetes import client
    settings = _Seen(base)
    src = NodeSloSource(NodeSloConfig(), client.ApiClient(), "node-a", Resources(4000, 8 << 30), settings)
    return src, settings.seen


def _doc(**strategy: object) -> dict[str, object]:
    return {"spec": {"resourceUsedThresholdWithBE": {"enable": True, **strategy}}}


@pytest.mark.parametrize("strategy", [
    {"cpuEvictTimeWindowSeconds": 10**9},
    {"cpuEvictTimeWindowSeconds": 0.01},
    {"cpuSuppressMinPercent": 10**9},
    {"cpuSuppressThresholdPercent": 101},
], ids=["window-huge", "window-tiny", "min-percent-huge", "threshold-101"])
def test_an_out_of_range_nodeslo_value_is_refused_and_the_settings_kept(
        strategy: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    src, seen = _source(PolicyConfig())
    assert src.update(_doc(cpuEvictTimeWindowSeconds=30)) and seen[-1].cpu_eviction.window_s == 30
    before = src.settings.policies
    assert not src.update(_doc(**{"cpuSuppressThresholdPercent": 50, **strategy}))
    assert src.settings.policies is before and len(seen) == 1
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and "must be" in refused[-1] and "\n" not in refused[-1], refused


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_a_non_finite_nodeslo_number_is_refused_in_one_line(value: float,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Kept out of the arithmetic (`cpuSuppressMinPercent` × capacity raised ValueError/OverflowError)."""
    src, seen = _source(PolicyConfig())
    for field in ("cpuSuppressMinPercent", "cpuEvictTimeWindowSeconds"):
        assert not src.update(_doc(**{field: value}))
        assert len(seen) == 0
        refused = [r for r in caplog.records if "finite" in r.getMessage()]
        assert refused and refused[-1].exc_info is None and "\n" not in refused[-1].getMessage(), refused
