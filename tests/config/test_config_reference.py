"""The configuration reference (docs/config.md) is generated from the config dataclasses and current: every
key the loader takes is in it with its type, its default (written as YAML that loads back to the agent's
default), its declared range or choices and words saying what it does. Regenerating it
(`scripts/gen_config_doc`, a real subprocess) gives the checked-in file byte for byte."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from agent.config import reference
from agent.config.agent import AgentConfig, load_config, read_config
from agent.config.provenance import file_keys
from qos.validation import BOUNDS, choices_of

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "config.md"


def _leaves(cls: type, prefix: str = "") -> list[str]:
    """Every key of config section `cls`, found here by its own walk: a field holding a dataclass (or an
    optional one) is a section, a tuple of dataclasses a key and a section of items (`path[]`)."""
    out = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in getattr(tp, "__args__", ()) if a is not type(None)]
        inner = args[0] if len(args) == 1 and type(None) in getattr(tp, "__args__", ()) else tp
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(inner):
            out += _leaves(inner, path + ".")  # type: ignore[arg-type]
            continue
        out.append(path)
        item = getattr(inner, "__args__", (None,))[0]
        if getattr(inner, "__origin__", None) is tuple and dataclasses.is_dataclass(item):
            out += _leaves(item, path + "[].")  # type: ignore[arg-type]
    return out


def _field(path: str) -> tuple[type, dataclasses.Field[Any]]:
    """The dataclass and field behind dotted key `path`."""
    cls: Any = AgentConfig
    *sections, name = path.replace("[]", "").split(".")
    for part in sections:
        tp = get_type_hints(cls)[part]
        args = [a for a in getattr(tp, "__args__", ()) if a is not type(None) and a is not Ellipsis]
        cls = tp if dataclasses.is_dataclass(tp) else args[0]
    return cls, next(f for f in dataclasses.fields(cls) if f.name == name)


def test_the_checked_in_reference_is_what_the_dataclasses_give() -> None:
    assert DOC.read_text() == reference.markdown(), "docs/config.md is stale: run scripts/gen_config_doc"


def test_the_generator_script_writes_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "config.md"
    run = subprocess.run([str(REPO / "scripts" / "gen_config_doc"), str(out)], capture_output=True, text=True,
                         timeout=120, check=False, env={**os.environ, "PYTHON": sys.executable})
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == DOC.read_bytes()


def test_every_key_the_loader_takes_is_in_the_reference_once() -> None:
    keys = [k.path for k in reference.config_keys()]
    assert keys == _leaves(AgentConfig)
    assert len(keys) == len(set(keys)) > 200
    top = {k.split(".", 1)[0] for k in keys}
    assert top == {f.name for f in dataclasses.fields(AgentConfig)}
    doc = DOC.read_text()
    assert all(f"| `{k}` |" in doc for k in keys)
    assert f"{len(keys)} keys in {len(top)} sections." in doc


def test_every_key_has_a_type_a_default_and_words() -> None:
    for k in reference.config_keys():
        assert k.type, k
        assert k.default or k.required, k
        assert len(k.doc) >= 12, k  # words, not a stray token
        assert "\n" not in k.doc, k


def test_ranges_and_choices_are_the_declared_ones() -> None:
    checked = 0
    for k in reference.config_keys():
        cls, f = _field(k.path)
        bounds = f.metadata.get(BOUNDS)
        allowed = choices_of(get_type_hints(cls)[f.name])
        if bounds is not None:
            assert k.allowed.startswith("(" if bounds.low_open else "["), k
            assert k.allowed.endswith("]"), k
            low, high = (int(v, 8) if k.path.endswith("_mode") else float(v)  # modes in octal: 0777
                         for v in k.allowed[1:-1].split(", "))
            assert (low, high) == (bounds.low, bounds.high), k
            checked += 1
        elif allowed is not None and set(allowed) != {True, False}:
            assert [yaml.safe_load(c) for c in k.allowed.split(", ")] == list(allowed), k
            checked += 1
        else:
            assert k.allowed == "", k
    assert checked >= 150  # the rest are strings, switches and lists


def test_the_defaults_as_written_load_back_as_the_agents_defaults(tmp_path: Path) -> None:
    """A file setting every key to the default the reference shows is the agent's default config."""
    doc: dict[str, Any] = {}
    for k in reference.config_keys():
        if reference.ITEM in k.path:
            continue
        *sections, name = k.path.split(".")
        node = doc
        for s in sections:
            node = node.setdefault(s, {})
        node[name] = yaml.safe_load(f"v: {k.default}")["v"]
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = read_config(path)
    assert loaded.config == AgentConfig()
    assert loaded.keys == {k.path for k in reference.config_keys() if reference.ITEM not in k.path}


def test_a_section_default_given_by_its_parent_is_the_one_shown() -> None:
    keys = {k.path: k for k in reference.config_keys()}
    assert keys["batch.origin"].default == "local"  # BatchConfig's own default is "annotation"
    assert keys["sources.kubelet.enabled"].default == "false"  # a source is off unless its section is there
    assert keys["sources.reporting.mode"].default == '"off"'  # YAML 1.1 reads a bare off as false
    assert keys["api.socket_mode"].default == "0660" and keys["api.socket_mode"].allowed == "[0, 0777]"
    assert keys["node.cpus"].type == "float | null" and keys["node.cpus"].allowed == "(0, 4096]"
    assert keys["standalone.workloads[].cgroup"].required
    assert keys["policies.suppression.policy"].allowed == "cpuset, cfsQuota"
    assert keys["state.await_scheduler_ack"].allowed == "true, false, auto"


def test_file_keys_are_the_leaves_a_document_sets() -> None:
    data = {"node": {"name": "n"}, "policies": {"suppression": {"threshold_percent": 50}, "failsafe": None},
            "standalone": {"workloads": [{"cgroup": "besteffort/a"}]}, "log": None}
    assert file_keys(data, AgentConfig) == {"node.name", "policies.suppression.threshold_percent",
                                            "standalone.workloads"}


def test_load_config_is_unchanged_by_the_key_record(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("loop: {interval_s: 0.5}\nsources: {yarn: {url: 'http://nm:8042'}}\n")
    loaded = read_config(path)
    assert loaded.config == load_config(path)
    assert loaded.keys == {"loop.interval_s", "sources.yarn.url", "sources.yarn.enabled"}
    assert loaded.sections == ("loop", "sources")
