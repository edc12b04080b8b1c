"""Config loading: every bad field is named; good files load; the shipped example is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.agent import AgentConfig, ConfigError, load_config
from agent.config.load import parse_bytes

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_example_config_loads() -> None:
    cfg = load_config(REPO / "examples" / "standalone.yaml")
    assert cfg.cgroups.root == "coloc-standalone"
    assert cfg.node.memory_bytes == 2 * 1024**3
    assert cfg.node.cpus == 2.0
    assert len(cfg.standalone.workloads) == 2
    assert cfg.standalone.workloads[1].priority == 5000


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == AgentConfig()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("loop: {interval_s: 0}", "loop.interval_s"),
        ("loop: {interval_s: fast}", "loop.interval_s"),
        ("node: {cpus: -1}", "node.cpus"),
        ("node: {memory: lots}", "node.memory"),
        ("node: {scope: galaxy}", "node.scope"),
        ("cgroups: {root: /etc}", "cgroups.root"),
        ("cgroups: {root: a/../../etc}", "cgroups.root"),
        ("cgroups: {yarn_hierarchy: a/b}", "cgroups.yarn_hierarchy"),
        ("cgroups: {driver: upstart}", "cgroups.driver"),
        ("eviction: {dry_run: maybe}", "eviction.dry_run"),
        ("eviction: {burst: 0}", "eviction.burst"),
        ("standalone: {workloads: [{cgroup: ../x}]}", "standalone.workloads[0]"),
        ("nodes: {}", "nodes"),
        ("loop: {intervall_s: 1}", "loop.intervall_s"),
    ],
)
def test_bad_field_is_named(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert field in str(err.value)
    assert "c.yaml" in str(err.value)


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "loop: [unclosed"))
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")


@pytest.mark.parametrize(("value", "expected"), [("2Gi", 2 << 30), ("512Mi", 512 << 20), (1024, 1024),
                                                 ("1.5Gi", 3 << 29), ("1G", 10**9)])
def test_parse_bytes(value: object, expected: int) -> None:
    assert parse_bytes(value, "x") == expected


@pytest.mark.parametrize("value", ["1m", "lots", True, -1.5, None])
def test_parse_bytes_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match="x:"):
        parse_bytes(value, "x")


def test_a_source_is_on_only_when_its_section_is_there(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "sources: {yarn: {url: 'http://127.0.0.1:8042'}}"))
    assert cfg.sources.yarn.enabled
    assert not cfg.sources.kubelet.enabled
    assert not cfg.sources.kube_api.enabled
    assert cfg.sources.reporting.mode == "off"
    assert not load_config(write(tmp_path, "")).sources.kubelet.enabled


@pytest.mark.parametrize(("text", "field"), [
    ("eviction: {rate_per_minute: .inf}", "eviction.rate_per_minute"),
    ("eviction: {rate_per_minute: .nan}", "eviction.rate_per_minute"),
    ("eviction: {recheck_cooldown_s: -1}", "eviction.recheck_cooldown_s"),
    ("loop: {fast_hp_jump_milli_cpu: -5}", "loop.fast_hp_jump_milli_cpu"),
    ("cgroups: {root: .}", "cgroups.root"),
    ("cgroups: {root: 'a//b'}", "cgroups.root"),
])
def test_non_finite_and_degenerate_values_are_refused(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("key", ["idle_stop_s", "options", "max_connections"])
def test_a_retired_api_setting_is_refused_saying_what_became_of_it(tmp_path: Path, key: str) -> None:
    p = tmp_path / "agent.yaml"
    p.write_text(f"api:\n  {key}: 60\n")
    retired = rf"api\.{key}: no longer a setting \(.*(serves|api\.).*\); delete it"
    with pytest.raises(ConfigError, match=retired):
        load_config(p)
