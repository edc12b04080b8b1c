"""`coloc-agent config check FILE` and `coloc-agent config show [--config FILE]`, as real subprocesses on
real files: check says `ok: N sections, M keys set` (exit 0) or the loader's one-line error (exit 2, no
traceback); show gives every key's effective value and its source (`default` or `yaml`), and marks the
policy settings a NodeSLO can replace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import reference
from agent.config.api import DEFAULT_ADMIN_SOCKET
from agent.sources.nodeslo_map import FIELDS

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "standalone.yaml"
ALL_KEYS = [k.path for k in reference.config_keys() if reference.ITEM not in k.path]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", "config", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def _leaves(data: object, prefix: str = "") -> set[str]:
    """The leaf keys of a YAML mapping, the sections of the reference being mappings."""
    sections = {s.path for s in reference.sections()}
    out: set[str] = set()
    for name, value in (data or {}).items() if isinstance(data, dict) else ():
        path = f"{prefix}{name}"
        if path in sections and isinstance(value, dict | None):
            out |= _leaves(value, path + ".")
        else:
            out.add(path)
    return out


def show_json(*args: str) -> dict[str, dict[str, Any]]:
    run = cli("show", "--json", *args)
    assert run.returncode == 0, run.stderr
    return {row["key"]: row for row in json.loads(run.stdout)}


def test_check_the_example_counts_its_sections_and_keys() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    run = cli("check", str(EXAMPLE))
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"ok: {len(data)} sections, {len(_leaves(data))} keys set\n"
    assert run.stderr == ""


def test_check_an_empty_file_is_ok_with_nothing_set(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    run = cli("check", str(empty))
    assert (run.returncode, run.stdout) == (0, "ok: 0 sections, 0 keys set\n")


@pytest.mark.parametrize(("text", "words"), [
    ("loop:\n  interval_s: 100\n", "loop.interval_s: must be in [0.05, 60], got 100"),
    ("loop:\n  interval: 1\n", "loop.interval: unknown field (known: "),
    ("policies:\n  suppression:\n    policy: quota\n", "policies.suppression.policy: must be one of"),
    ("node: [1\n", "not valid YAML"),
])
def test_check_a_wrong_file_is_the_loaders_one_line_and_exit_2(tmp_path: Path, text: str, words: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    run = cli("check", str(bad))
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"coloc-agent config check: {bad}: "), run.stderr
    assert words in lines[0]
    assert "Traceback" not in run.stderr


def test_check_a_missing_file(tmp_path: Path) -> None:
    run = cli("check", str(tmp_path / "nope.yaml"))
    assert run.returncode == 2
    assert run.stderr == (f"coloc-agent config check: {tmp_path / 'nope.yaml'}: cannot read config: "
                          "No such file or directory\n")


def test_show_gives_each_key_its_value_and_source(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump({
        "node": {"name": "n1", "cpus": 2},
        "policies": {"suppression": {"threshold_percent": 50}},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
        "standalone": {"workloads": [{"cgroup": "besteffort/a", "milli_cpu": 500}]},
    }))
    rows = show_json("--config", str(cfg))
    assert list(rows) == ALL_KEYS
    set_ = {k for k, r in rows.items() if r["source"] == "yaml"}
    assert set_ == {"node.name", "node.cpus", "policies.suppression.threshold_percent", "api.socket_path",
                    "standalone.workloads"}
    assert {r["source"] for k, r in rows.items() if k not in set_} == {"default"}
    assert rows["node.cpus"]["value"] == 2.0
    assert rows["policies.suppression.threshold_percent"]["value"] == 50.0
    assert rows["loop.interval_s"]["value"] == 1.0
    # effective: the admin socket the agent derives beside the read socket
    assert rows["api.admin_socket_path"] == {"key": "api.admin_socket_path", "source": "default",
                                             "value": str(tmp_path / "admin.sock")}
    assert rows["standalone.workloads"]["value"] == [
        {"cgroup": "besteffort/a", "priority": None, "milli_cpu": 500, "memory": 0}]


def test_show_marks_what_a_nodeslo_can_replace(tmp_path: Path) -> None:
    rows = show_json()
    mapped = {f"policies.{section}.{name}": f"resourceUsedThresholdWithBE.{field}"
              for field, section, name in FIELDS}
    for key, field in mapped.items():
        assert rows[key]["nodeslo"] == field
    qos = {k for k in rows if k.startswith(("resource_qos.memory_qos.", "resource_qos.cpu_burst."))}
    assert qos and all(rows[k]["nodeslo"] for k in qos)
    assert not [k for k, r in rows.items() if "nodeslo" in r and k not in mapped and k not in qos]


def test_show_without_a_file_is_every_default_as_text() -> None:
    run = cli("show")
    assert run.returncode == 0, run.stderr
    head, *lines = run.stdout.splitlines()
    assert head == "# no config file: every key at its default"
    rows = [ln.split(maxsplit=2) for ln in lines if not ln.startswith("#")]
    assert [r[0] for r in rows] == ALL_KEYS
    assert {r[1] for r in rows} == {"default"}
    by_key = {r[0]: r[2] for r in rows}
    assert by_key["api.admin_socket_path"] == DEFAULT_ADMIN_SOCKET
    assert by_key["api.socket_mode"] == "0660"
    assert by_key["loop.psi_trigger"] == "some 20000 500000"
    assert by_key["policies.suppression.threshold_percent"] == (
        "65.0   (NodeSLO: resourceUsedThresholdWithBE.cpuSuppressThresholdPercent)")
    assert "sources.nodeslo is off here" in run.stdout


def test_show_of_a_wrong_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("state: {path: relative}\n")
    run = cli("show", "--config", str(bad))
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == f"coloc-agent config show: {bad}: state.path: must be absolute, got 'relative'\n"
