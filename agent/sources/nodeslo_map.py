"""Koordinator's NodeSLO mapped onto the policy settings (the mapping is in `agent/sources/nodeslo.py`'s
docstring). Pure, no I/O: the agent names each setting's source from here without importing the
Kubernetes client stack when NodeSLO is off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.config.load import ConfigError, check_bound
from qos.cpu_burst import POLICIES as BURST_POLICIES
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings
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


# -- memory QoS and CPU burst (koordlet's CgroupReconcile and CPUBurst strategies) ---------------------------

_MEMORY_FIELDS = (("minLimitPercent", "min_limit_percent"), ("lowLimitPercent", "low_limit_percent"),
                  ("throttlingPercent", "throttling_percent"))
_CLASSES = (("lsrClass", "lsr"), ("lsClass", "ls"), ("beClass", "be"), ("systemClass", "system"))


@dataclass(frozen=True, slots=True)
class ResourceQos:
    """Memory QoS and CPU burst settings in force, and where each came from (NodeSLO | yaml)."""

    memory: MemoryQosSettings
    burst: CpuBurstSettings
    memory_source: str = YAML
    burst_source: str = YAML


def _int_field(obj: Mapping[str, object], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeSloError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def _object(value: object, where: str) -> Mapping[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise NodeSloError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _memory_class(raw: object, where: str) -> MemoryQosClass:
    """One class's `memoryQOS` merged over koordlet's default (`DefaultMemoryQOS`: all percents 0, off)."""
    cfg = _object(raw, where)
    if cfg is None:
        return MemoryQosClass()
    enable = cfg.get("enable")
    if enable is not None and not isinstance(enable, bool):
        raise NodeSloError(f"{where}.enable: expected true or false, got {enable!r}")
    kw: dict[str, Any] = {"enable": enable is True}
    for key, name in _MEMORY_FIELDS:
        value = _int_field(cfg, key, where)
        if value is not None:
            kw[name] = value
    try:
        return MemoryQosClass(**kw)
    except ValueError as err:
        raise NodeSloError(f"{where}: {err}") from None


def _memory_settings(raw: object) -> MemoryQosSettings:
    where = "NodeSLO spec.resourceQOSStrategy"
    strategy = _object(raw, where)
    assert strategy is not None
    classes = {}
    for key, name in _CLASSES:
        cls = _object(strategy.get(key), f"{where}.{key}")
        classes[name] = _memory_class(cls.get("memoryQOS") if cls else None, f"{where}.{key}.memoryQOS")
    return MemoryQosSettings(**classes)


def _burst_settings(raw: object) -> CpuBurstSettings:
    """`cpuBurstStrategy` merged over koordlet's default (`DefaultCPUBurstConfig`: none, 1000 %)."""
    where = "NodeSLO spec.cpuBurstStrategy"
    cfg = _object(raw, where)
    assert cfg is not None
    kw: dict[str, Any] = {}
    policy = cfg.get("policy")
    if policy is not None and policy != "":
        if policy not in BURST_POLICIES:
            raise NodeSloError(f"{where}.policy: must be one of {', '.join(BURST_POLICIES)}, got {policy!r}")
        kw["policy"] = policy
    percent = _int_field(cfg, "cpuBurstPercent", where)
    if percent is not None:
        kw["cpu_burst_percent"] = percent
    try:
        return CpuBurstSettings(**kw)
    except ValueError as err:
        raise NodeSloError(f"{where}.cpuBurstPercent: {err}") from None


def apply_resource_qos(base: ResourceQos, doc: object | None) -> ResourceQos:
    """The NodeSLO's `resourceQOSStrategy` (memory QoS) and `cpuBurstStrategy` where it gives them, else the
    YAML's (`base`). Raises NodeSloError naming the field."""
    spec = doc.get("spec") if isinstance(doc, Mapping) else None
    if not isinstance(spec, Mapping):
        return base
    out = base
    if spec.get("resourceQOSStrategy") is not None:
        out = dataclasses.replace(out, memory=_memory_settings(spec["resourceQOSStrategy"]),
                                  memory_source=NODESLO)
    if spec.get("cpuBurstStrategy") is not None:
        out = dataclasses.replace(out, burst=_burst_settings(spec["cpuBurstStrategy"]), burst_source=NODESLO)
    return out
