"""One declaration per numeric setting: its range is declared once, next to its type and default
(`qos.validation.bounded`), and the same code enforces it wherever a config object is made — the YAML loader
(naming the dotted field), a section built directly, and `dataclasses.replace` as the NodeSLO mapping does.

Before, `policies.cpu_eviction.window_s` was declared [0.1, 3600] but the section itself took any value > 0,
and the agent's own sections kept their ranges in hand-written checks that declared nothing."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config.agent import AgentConfig, load_config
from agent.config.load import ConfigError
from agent.sources.nodeslo_map import NodeSloError, apply_nodeslo
from qos.cpu_eviction import CpuEvictionConfig
from qos.model import Resources
from qos.policies import PolicyConfig
from qos.validation import Bounds, bounds_of


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def _numeric(tp: Any) -> type | None:
    """int or float for a field of that one number type (or null); None otherwise (a byte size is `int | str`:
    a Kubernetes quantity, which `parse_bytes` reads and its section bounds)."""
    kinds = [a for a in _args(tp) if a is not type(None)]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (int, float) else None


def _sections(cls: type, path: str) -> list[tuple[str, type]]:
    """Every config dataclass reachable from `cls`, with its dotted path (a list's items as `[0]`)."""
    out = [(path, cls)]
    for name, tp in typing.get_type_hints(cls).items():
        for arg in _args(tp):
            item = typing.get_args(arg)[0] if typing.get_origin(arg) is tuple else arg
            if isinstance(item, type) and dataclasses.is_dataclass(item):
                sub = f"{path}.{name}" if path else name
                out += _sections(item, sub + ("[0]" if item is not arg else ""))
    return out


SECTIONS = [(p, c) for p, c in _sections(AgentConfig, "") if p]
FIELDS = [
    (section, cls, f.name, kind, bounds_of(cls).get(f.name))
    for section, cls in SECTIONS
    for f in dataclasses.fields(cls)
    if (kind := _numeric(typing.get_type_hints(cls)[f.name])) is not None
]
IDS = [f"{s}.{n}" for s, _, n, _, _ in FIELDS]


def _beyond(bounds: Bounds, kind: type) -> list[int | float]:
    low = [bounds.low] if bounds.low_open else [bounds.low - 1]
    out: list[int | float] = [*low, bounds.high + 1]
    if kind is float:
        if not bounds.low_open:
            out.append(math.nextafter(bounds.low, -math.inf))
        out.append(math.nextafter(bounds.high, math.inf))
    return out


def _required(cls: type) -> dict[str, object]:
    """What a section needs besides the field under test (a local workload names its cgroup)."""
    return {"cgroup": "w"} if any(f.name == "cgroup" for f in dataclasses.fields(cls)) else {}


def test_window_s_is_held_to_its_declared_range_when_the_section_is_built_directly() -> None:
    with pytest.raises(ValueError, match=r"cpu_eviction\.window_s: must be in \[0\.1, 3600\], got 0\.05"):
        CpuEvictionConfig(window_s=0.05)
    with pytest.raises(ValueError, match=r"cpu_eviction\.window_s: must be in \[0\.1, 3600\]"):
        dataclasses.replace(CpuEvictionConfig(), window_s=3601.0)


def test_a_nodeslo_window_below_the_range_is_refused_and_the_base_kept() -> None:
    base = PolicyConfig()
    doc = {"spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuEvictTimeWindowSeconds": 0.05}}}
    with pytest.raises(NodeSloError, match=r"cpu_eviction\.window_s: must be in \[0\.1, 3600\]"):
        apply_nodeslo(base, doc, Resources(4000, 8 << 30))
    assert base.cpu_eviction.window_s == 10.0


def test_the_tree_has_numeric_fields() -> None:
    assert len(FIELDS) > 100, IDS  # every section is walked, not only the policies


@pytest.mark.parametrize(("section", "cls", "name", "kind", "bounds"), FIELDS, ids=IDS)
def test_every_numeric_setting_declares_its_range_with_its_type(section: str, cls: type, name: str,
                                                                  kind: type, bounds: Bounds | None) -> None:
    assert bounds is not None, f"{section}.{name} declares no range (qos.validation.bounded)"
    assert bounds.low < bounds.high
    assert all(isinstance(b, kind) and not isinstance(b, bool) for b in (bounds.low, bounds.high)), bounds
    default = getattr(cls(**_required(cls)), name)
    assert default is None or bounds.holds(default), (default, bounds)


@pytest.mark.parametrize(("section", "cls", "name", "kind", "bounds"), FIELDS, ids=IDS)
def test_the_section_itself_refuses_a_value_beyond_its_range(section: str, cls: type, name: str,
                                                             kind: type, bounds: Bounds) -> None:
    assert bounds is not None
    base = cls(**_required(cls))
    for value in _beyond(bounds, kind):
        with pytest.raises(ValueError) as err:
            cls(**_required(cls), **{name: value})
        assert f"{name}: must be in {bounds}, got" in str(err.value), str(err.value)
        with pytest.raises(ValueError):
            dataclasses.replace(base, **{name: value})


def _yaml(tmp_path: Path, section: str, values: dict[str, object]) -> Path:
    data: dict[str, Any] = {}
    node: Any = data
    parts = section.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part.removesuffix("[0]"), {})
    last = parts[-1]
    if last.endswith("[0]"):
        node[last.removesuffix("[0]")] = [values]
    else:
        node[last] = values
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("section", "cls", "name", "kind", "bounds"), FIELDS, ids=IDS)
def test_the_loader_refuses_it_naming_the_dotted_field_and_changes_nothing(
        tmp_path: Path, section: str, cls: type, name: str, kind: type, bounds: Bounds) -> None:
    assert bounds is not None
    for value in _beyond(bounds, kind):
        with pytest.raises(ConfigError) as err:
            load_config(_yaml(tmp_path, section, {**_required(cls), name: value}))
        msg = str(err.value)
        assert "\n" not in msg
        assert f"{section}.{name}: must be in {bounds}, got" in msg, msg
