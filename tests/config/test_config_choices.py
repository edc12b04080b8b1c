"""A choice setting is declared one way, by its type (`Literal[...]`, or `bool` for true | false), and refused
one way: the loader and a section's `__post_init__` (`qos.validation.check_choices`) read the allowed values
from the annotation and say the same thing, naming the field, the value and what it may be."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest

from agent.config.agent import AgentConfig, CgroupConfig, LogConfig, StateConfig
from agent.config.api import ApiConfig
from agent.config.batch_limits import BatchLimitsConfig
from agent.config.load import ConfigError, from_mapping
from agent.config.network import NetworkConfig
from agent.config.sources import NodeManagerConfig, ReportingConfig
from qos.cpu_eviction import CpuEvictionConfig
from qos.memory_eviction import MemoryEvictionConfig
from qos.validation import check_choices, choice_fields, choices_of


def _sections(cls: type, where: str = "") -> list[tuple[str, type]]:
    """Every config section under `cls` with its dotted path, `cls` included."""
    found = [(where, cls)]
    for f in dataclasses.fields(cls):
        tp = type(getattr(cls(), f.name)) if f.default_factory is not dataclasses.MISSING else None
        if tp is not None and dataclasses.is_dataclass(tp):
            found += _sections(tp, f"{where}.{f.name}" if where else f.name)
    return found


@pytest.mark.parametrize(("cls", "where", "name", "bad", "allowed"), [
    (BatchLimitsConfig, "batch_limits", "tier_memory", "max", "'off', 'high', 'high+max'"),
    (BatchLimitsConfig, "batch_limits", "cfs_quota", "sometimes", "'auto', 'on', 'off'"),
    (ReportingConfig, "sources.reporting", "mode", "carrier-pigeon", "'annotation', 'off'"),
    (ReportingConfig, "sources.reporting", "yarn", "never", "'always', 'unless-operator'"),
    (ReportingConfig, "sources.reporting", "priority_class", "koord-best",
     "'koord-prod', 'koord-mid', 'koord-batch', 'koord-free'"),
    (NodeManagerConfig, "sources.yarn", "scheme", "gopher", "'http', 'https'"),
    (StateConfig, "state", "await_scheduler_ack", "maybe", "true, false, 'auto'"),
    (StateConfig, "state", "await_scheduler_ack", 1, "true, false, 'auto'"),
    (CgroupConfig, "cgroups", "driver", "upstart", "'auto', 'cgroupfs', 'systemd'"),
    (LogConfig, "log", "level", "loud", "'debug', 'info', 'warning', 'error'"),
    (NetworkConfig, "network", "leaf", "sfq", "'fq_codel', 'none'"),
])
def test_a_bad_choice_is_refused_alike_by_the_loader_and_the_section(
        cls: type, where: str, name: str, bad: object, allowed: str) -> None:
    said = f"{where}.{name}: must be one of {allowed}, got {bad!r}"
    with pytest.raises(ConfigError) as loaded:
        from_mapping(cls, {name: bad}, where)
    assert str(loaded.value) == said
    with pytest.raises(ConfigError) as built:
        cls(**{name: bad})
    assert str(built.value) == said


@pytest.mark.parametrize(("cls", "where", "name"), [
    (BatchLimitsConfig, "batch_limits", "yarn"),
    (BatchLimitsConfig, "batch_limits", "on_creation"),
    (CgroupConfig, "cgroups", "setup_tiers"),
    (NetworkConfig, "network", "own_device"),
    (CpuEvictionConfig, "cpu_eviction", "enabled"),
    (MemoryEvictionConfig, "memory_eviction", "enabled"),
])
@pytest.mark.parametrize("bad", [1, "yes", None])
def test_a_switch_is_true_or_false_and_nothing_else(cls: type, where: str, name: str, bad: object) -> None:
    said = f"{where}.{name}: must be true or false, got {bad!r}"
    with pytest.raises(ValueError) as built:
        cls(**{name: bad})
    assert str(built.value) == said
    if cls.__module__.startswith("agent.config"):
        with pytest.raises(ConfigError) as loaded:
            from_mapping(cls, {name: bad}, where)
        assert str(loaded.value) == said


def test_every_choice_of_the_config_is_declared_by_its_type() -> None:
    """The sections' choice fields are read from their annotations: a string field whose values are a fixed
    few would be missing here (and so be checked some other way)."""
    declared = {f"{where}.{name}" for where, cls in _sections(AgentConfig) for name in choice_fields(cls)}
    for field in ("node.scope", "cgroups.driver", "log.level", "log.format", "state.await_scheduler_ack",
                  "batch_limits.cfs_quota", "batch_limits.tier_memory", "batch_limits.enabled",
                  "network.leaf", "sources.yarn.scheme", "sources.reporting.mode", "sources.reporting.yarn",
                  "sources.reporting.priority_class", "eviction.dry_run", "drain.cordon"):
        assert field in declared, field
    assert "cgroups.systemd_bus" not in declared  # auto, off or a path: not a choice, checked by hand


def test_the_allowed_values_come_from_the_annotation() -> None:
    assert choices_of(Literal["a", "b"]) == ("a", "b")
    assert choices_of(bool) == (True, False)
    assert choices_of(Literal["a"] | None) == ("a", None)
    assert choices_of(bool | Literal["auto"]) == (True, False, "auto")
    assert choices_of(str) is None and choices_of(int | str) is None and choices_of(float | None) is None

    @dataclasses.dataclass(frozen=True)
    class Section:
        mode: Literal["x", "y"] | None = None

    check_choices(Section(), "s")
    check_choices(Section("y"), "s")
    with pytest.raises(ValueError, match=r"^s\.mode: must be one of 'x', 'y', null, got 'z'$"):
        check_choices(Section("z"), "s")  # type: ignore[arg-type]


def test_a_choice_keeps_the_value_and_its_type() -> None:
    cfg = from_mapping(AgentConfig, {"state": {"await_scheduler_ack": False},
                                     "batch_limits": {"tier_memory": "high+max"}})
    assert cfg.state.await_scheduler_ack is False and cfg.batch_limits.tier_memory == "high+max"


@pytest.mark.parametrize(("kw", "said"), [
    ({"socket_path": None}, "api: set socket_path, tcp_address, or both"),
    ({"socket_path": "relative.sock"}, "api.socket_path: must be absolute, got 'relative.sock'"),
    ({"max_streams": 10, "max_concurrent_rpcs": 10}, "api.max_concurrent_rpcs: must exceed max_streams"),
    ({"max_streams": 0}, "api.max_streams: must be in [1, 100000], got 0"),
])
def test_the_api_section_raises_the_config_error(kw: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError) as built:
        ApiConfig(**kw)
    assert str(built.value).startswith(said), str(built.value)
    with pytest.raises(ConfigError) as loaded:
        from_mapping(AgentConfig, {"api": kw})
    assert str(loaded.value).startswith(said), str(loaded.value)
