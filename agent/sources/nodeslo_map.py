"""Koordinator's NodeSLO mapped onto the policy settings (the mapping is in `agent/sources/nodeslo.py`'s
docstring). Pure, no I/O: the agent names each setting's source from here without importing the
Kubernetes client stack when NodeSLO is off.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.config.load import ConfigError, check_bound
from agent.config.provenance import DEFAULT, YAML
from qos.blkio_qos import KINDS as BLOCK_KINDS
from qos.blkio_qos import BlkioBlock, BlkioQosClass, BlkioQosSettings
from qos.cpu_burst import POLICIES as BURST_POLICIES
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings
from qos.model import IoCap, Resources
from qos.policies import PolicyConfig
from qos.validation import short

NODESLO = "NodeSLO"
__all__ = ["DEFAULT", "FIELDS", "NODESLO", "YAML", "NodeSloError", "ResourceQos", "apply_nodeslo",
           "apply_resource_qos", "settings_sources"]
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


def settings_sources(base: PolicyConfig | None = None, keys: frozenset[str] | None = None) -> dict[str, str]:
    """Where every mapped setting of `base` (the YAML's policy settings) came from: `yaml` when the config
    file set it (`keys`: the file's keys, `policies.<section>.<name>`), else `default`. Without the file's
    keys a setting is told by its value: `default` where it is the declared default (None: every setting's
    default)."""
    if base is None:
        return {f"{section}.{name}": DEFAULT for _, section, name in FIELDS}
    known = None if keys is None else {k.removeprefix("policies.") for k in keys if k.startswith("policies.")}
    if known is None:
        plain = PolicyConfig()
        return {f"{s}.{n}": DEFAULT if getattr(getattr(base, s), n) == getattr(getattr(plain, s), n) else YAML
                for _, s, n in FIELDS}
    return {f"{section}.{name}": YAML if f"{section}.{name}" in known else DEFAULT
            for _, section, name in FIELDS}


def apply_nodeslo(
    base: PolicyConfig, doc: object, capacity: Resources, base_sources: Mapping[str, str] | None = None
) -> tuple[PolicyConfig, dict[str, str]]:
    """The settings in force and where each came from (`base_sources`: where the YAML's came from). Raises
    NodeSloError naming what is wrong."""
    sources = dict(base_sources) if base_sources is not None else settings_sources(base)
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


# -- memory QoS, CPU burst, disk QoS (koordlet's CgroupReconcile, CPUBurst, BlkIOReconcile strategies) ----

_MEMORY_FIELDS = (("minLimitPercent", "min_limit_percent"), ("lowLimitPercent", "low_limit_percent"),
                  ("throttlingPercent", "throttling_percent"))
_CLASSES = (("lsrClass", "lsr"), ("lsClass", "ls"), ("beClass", "be"), ("systemClass", "system"))


@dataclass(frozen=True, slots=True)
class ResourceQos:
    """Memory QoS, CPU burst and disk QoS settings in force, and where each came from (NodeSLO | yaml; the
    YAML gives no disk QoS: its default is none)."""

    memory: MemoryQosSettings
    burst: CpuBurstSettings
    memory_source: str = YAML
    burst_source: str = YAML
    blkio: BlkioQosSettings = dataclasses.field(default_factory=BlkioQosSettings)
    blkio_source: str = YAML


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


_INT64_MAX = (1 << 63) - 1
_CAP_FIELDS = (("readBPS", "rbps"), ("writeBPS", "wbps"), ("readIOPS", "riops"), ("writeIOPS", "wiops"))
_MODEL_FIELDS = ("modelReadBPS", "modelWriteBPS", "modelReadSeqIOPS", "modelWriteSeqIOPS",
                 "modelReadRandIOPS", "modelWriteRandIOPS")
_DEVICE_PART = re.compile(r"[A-Za-z0-9_.:+@-]{1,255}")


def _bounded_int(obj: Mapping[str, object], key: str, where: str, low: int,
                 high: int = _INT64_MAX) -> int | None:
    """`obj[key]` (None: absent) if an integer in [low, high]: the CRD's bounds, within its int64 format."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bound = f"from {low} to {high}" if high < _INT64_MAX else f"≥ {low}"
        if high == _INT64_MAX and isinstance(value, int) and value > high:
            bound += " that fits in int64"
        raise NodeSloError(f"{where}.{key}: expected an integer {bound}, got {short(value)}")
    return value


def _device_path(name: str) -> bool:
    """A path under /dev/ of plain names (no `.` or `..`): what the agent may resolve to a disk."""
    parts = name.removeprefix("/dev/").split("/") if name.startswith("/dev/") else []
    return bool(parts) and all(_DEVICE_PART.fullmatch(p) and p not in (".", "..") for p in parts)


def _blkio_block(raw: object, where: str) -> BlkioBlock:
    """One `blocks` entry (koordlet's `BlockCfg`); an unknown type or a missing name is what koordlet fails
    the class's whole update on."""
    block = _object(raw, where)
    if block is None:
        raise NodeSloError(f"{where}: expected an object, got null")
    kind = block.get("type")
    if kind not in BLOCK_KINDS:
        raise NodeSloError(f"{where}.type: must be one of {', '.join(BLOCK_KINDS)}, got {short(kind)}")
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise NodeSloError(f"{where}.name: expected a non-empty string, got {short(name)}")
    if kind == "device" and not _device_path(name):
        raise NodeSloError(f"{where}.name: a device block names a device under /dev/ (e.g. /dev/vdb), "
                           f"got {short(name)}")
    io_where = f"{where}.ioCfg"
    io = _object(block.get("ioCfg"), io_where) or {}
    # 0 is koordlet's "no cap" (it writes `MAJ:MIN 0`, which lifts a v1 throttle)
    caps = {attr: _bounded_int(io, key, io_where, 0) or None for key, attr in _CAP_FIELDS}
    user_model = io.get("enableUserModel")
    if user_model is not None and not isinstance(user_model, bool):
        raise NodeSloError(f"{io_where}.enableUserModel: expected true or false, got {short(user_model)}")
    model = tuple((key, v) for key in _MODEL_FIELDS if (v := _bounded_int(io, key, io_where, 1)) is not None)
    return BlkioBlock(
        name, kind, IoCap(**caps),
        weight_percent=_bounded_int(io, "ioWeightPercent", io_where, 1, 100),
        # no bound in the CRD; koordlet's blkio.cost.qos validator refuses a negative one
        read_latency_us=_bounded_int(io, "readLatency", io_where, 0),
        write_latency_us=_bounded_int(io, "writeLatency", io_where, 0),
        read_latency_percent=_bounded_int(io, "readLatencyPercent", io_where, 0, 100),
        write_latency_percent=_bounded_int(io, "writeLatencyPercent", io_where, 0, 100),
        user_model=user_model, model=model)


def _blkio_class(raw: object, where: str) -> BlkioQosClass:
    """One class's `blkioQOS` over koord-manager's default (`NoneBlkIOQOS`: off, no blocks)."""
    cfg = _object(raw, where)
    if cfg is None:
        return BlkioQosClass()
    enable = cfg.get("enable")
    if enable is not None and not isinstance(enable, bool):
        raise NodeSloError(f"{where}.enable: expected true or false, got {short(enable)}")
    blocks = cfg.get("blocks")
    if blocks is None:
        blocks = []
    if not isinstance(blocks, list | tuple):
        raise NodeSloError(f"{where}.blocks: expected a list, got {type(blocks).__name__}")
    return BlkioQosClass(enable is True,
                         tuple(_blkio_block(b, f"{where}.blocks[{i}]") for i, b in enumerate(blocks)))


def _blkio_settings(raw: object) -> BlkioQosSettings:
    where = "NodeSLO spec.resourceQOSStrategy"
    strategy = _object(raw, where)
    assert strategy is not None
    classes = {}
    for key, name in (*_CLASSES, ("cgroupRoot", "root")):
        cls = _object(strategy.get(key), f"{where}.{key}")
        classes[name] = _blkio_class(cls.get("blkioQOS") if cls else None, f"{where}.{key}.blkioQOS")
    return BlkioQosSettings(**classes)


def apply_resource_qos(base: ResourceQos, doc: object | None) -> ResourceQos:
    """The NodeSLO's `resourceQOSStrategy` (memory QoS, disk QoS) and `cpuBurstStrategy` where it gives them,
    else the YAML's (`base`). Raises NodeSloError naming the field."""
    spec = doc.get("spec") if isinstance(doc, Mapping) else None
    if not isinstance(spec, Mapping):
        return base
    out = base
    if spec.get("resourceQOSStrategy") is not None:
        strategy = spec["resourceQOSStrategy"]
        out = dataclasses.replace(out, memory=_memory_settings(strategy), memory_source=NODESLO,
                                  blkio=_blkio_settings(strategy), blkio_source=NODESLO)
    if spec.get("cpuBurstStrategy") is not None:
        out = dataclasses.replace(out, burst=_burst_settings(spec["cpuBurstStrategy"]), burst_source=NODESLO)
    return out
