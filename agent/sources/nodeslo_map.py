"""Koordinator's NodeSLO mapped onto the policy settings (the mapping is in `agent/sources/nodeslo.py`'s
docstring). Pure, no I/O: the agent names each setting's source from here without importing the
Kubernetes client stack when NodeSLO is off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from agent.config.load import ConfigError, check_bound
from qos.model import Resources
from qos.policies import PolicyConfig

YAML, NODESLO = "yaml", "NodeSLO"
# (NodeSLO field, policy section, setting)
FIELDS = (
    ("cpuSuppressThresholdPercent", "suppression", "threshold_percent"),
    ("cpuSuppressPolicy", "suppression", "policy"),
    ("cpuSuppressMinPercent", "suppression", "min_milli_cpu"),
    ("memoryEvictThresholdPercent", "memory_eviction", "threshold_percent"),
    ("memoryEvictLowerPercent", "memory_eviction", "lower_percent"),
    ("cpuEvictBESatisfactionUpperPercent", "cpu_eviction", "satisfaction_upper_percent"),
    ("cpuEvictBESatisfactionLowerPercent", "cpu_eviction", "satisfaction_lower_percent"),
    ("cpuEvictBEUsageThresholdPercent", "cpu_eviction", "be_usage_threshold_percent"),
    ("cpuEvictTimeWindowSeconds", "cpu_eviction", "window_s"),
)
_SATISFACTION = ("cpuEvictBESatisfactionUpperPercent", "cpuEvictBESatisfactionLowerPercent")


class NodeSloError(ValueError):
    """The NodeSLO cannot be applied; the message names the field."""


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NodeSloError(f"{where}: expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):  # JSON has no NaN or inf, but a YAML-written object can carry them
        raise NodeSloError(f"{where}: expected a finite number, got {value!r}")
    return number


def _setting(field: str, value: object, capacity: Resources) -> object:
    where = f"NodeSLO spec.resourceUsedThresholdWithBE.{field}"
    if field == "cpuSuppressPolicy":
        if value not in ("cpuset", "cfsQuota"):
            raise NodeSloError(f"{where}: must be cpuset or cfsQuota, got {value!r}")
        return value
    number = _number(value, where)
    if field == "cpuSuppressMinPercent":
        return int(capacity.milli_cpu * number / 100)
    return number


def settings_sources(base: PolicyConfig | None = None) -> dict[str, str]:
    """Every mapped setting, from the YAML."""
    del base
    return {f"{section}.{name}": YAML for _, section, name in FIELDS}


def apply_nodeslo(
    base: PolicyConfig, doc: object, capacity: Resources
) -> tuple[PolicyConfig, dict[str, str]]:
    """The settings in force and where each came from. Raises NodeSloError naming what is wrong."""
    sources = settings_sources(base)
    spec = doc.get("spec") if isinstance(doc, Mapping) else None
    strategy = spec.get("resourceUsedThresholdWithBE") if isinstance(spec, Mapping) else None
    if strategy is None:
        return base, sources
    if not isinstance(strategy, Mapping):
        raise NodeSloError("NodeSLO spec.resourceUsedThresholdWithBE: expected an object")
    if strategy.get("enable") is not True:
        return base, sources
    given = {k: v for k, v in strategy.items() if v is not None}
    if (_SATISFACTION[0] in given) != (_SATISFACTION[1] in given):
        given = {k: v for k, v in given.items() if k not in _SATISFACTION}  # koordlet: "not config"
    changes: dict[str, dict[str, Any]] = {}
    for field, section, name in FIELDS:
        if field in given:
            value = _setting(field, given[field], capacity)
            try:  # the range the YAML loader enforces
                check_bound(type(getattr(base, section)), name, value, f"{section}.{name}")
            except ConfigError as err:
                raise NodeSloError(f"NodeSLO {field} refused: {err}") from None
            changes.setdefault(section, {})[name] = value
            sources[f"{section}.{name}"] = NODESLO
    try:
        sections = {s: dataclasses.replace(getattr(base, s), **kw) for s, kw in changes.items()}
        return dataclasses.replace(base, **sections), sources
    except (ValueError, TypeError) as err:
        raise NodeSloError(f"NodeSLO refused: {err}") from err
