"""`coloc-agent status` and `top` find a real agent from its config file (`--config`: api.socket_path,
metrics.bind/port), say in one line when no agent answers and how to point at one, and `status` names the
source of each policy setting: `default` where nobody set it, `yaml` where the config file did (`NodeSLO`
where the node's NodeSLO does: tests/koord/test_koord_status_settings.py). Real `coloc-agent run`
processes on a private real cgroup root, real sockets, the real CLI as subprocesses."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
from pathlib import Path

import pytest
from kit.agentproc import agent_argv, agent_config, running_agent
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.config.agent import read_config
from agent.sources.nodeslo_map import FIELDS, NODESLO, apply_nodeslo, settings_sources
from agent.sources.settings import SettingsInForce
from qos.model import Resources
from qos.policies import PolicyConfig

MAPPED = {f"{section}.{name}" for _, section, name in FIELDS}
POINT = "point at one with --socket PATH or --config FILE (the agent's config)"


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agent_argv(*args), capture_output=True, text=True, timeout=timeout, check=False)


# -- where each setting came from, without a process ---------------------------------------------------

def test_a_loaded_files_settings_are_yaml_where_it_sets_them_else_default(tmp_path: Path) -> None:
    cfg = tmp_path / "a.yaml"
    cfg.write_text("policies:\n  suppression: {threshold_percent: 65}\n  cpu_eviction: {window_s: 15}\n")
    loaded = read_config(cfg)
    policies = loaded.config.policies
    sources = settings_sources(policies, loaded.keys)
    # set to the default value, but set: the file's
    assert {k for k, v in sources.items() if v == "yaml"} == {"suppression.threshold_percent",
                                                             "cpu_eviction.window_s"}
    assert {v for k, v in sources.items() if k not in ("suppression.threshold_percent",
                                                       "cpu_eviction.window_s")} == {"default"}
    settings = SettingsInForce(policies, None, nodeslo=False, file_keys=loaded.keys)  # type: ignore[arg-type]
    assert settings.view()[1] == sources
    # the NodeSLO gives one: that one is NodeSLO, the rest as before
    doc = {"spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 30}}}
    _, after = apply_nodeslo(policies, doc, Resources(2000, 1 << 30), settings.yaml_sources)
    assert after == {**sources, "suppression.threshold_percent": NODESLO}


def test_settings_no_file_built_are_told_by_their_value() -> None:
    assert set(settings_sources(None).values()) == {"default"}
    assert set(settings_sources(PolicyConfig()).values()) == {"default"}
    base = PolicyConfig()
    made = dataclasses.replace(base, suppression=dataclasses.replace(base.suppression,
                                                                     threshold_percent=50.0))
    assert {k for k, v in settings_sources(made).items() if v == "yaml"} == {"suppression.threshold_percent"}


# -- no agent there -------------------------------------------------------------------------------------

def test_status_with_no_agent_is_one_line_saying_so(tmp_path: Path) -> None:
    missing = tmp_path / "agent.sock"
    run = cli("status", "--socket", str(missing), "--timeout", "2")
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr == f"coloc-agent status: no agent answers at {missing} (no such socket); {POINT}\n"

    cfg = tmp_path / "agent.yaml"
    sock = tmp_path / "run" / "other.sock"
    cfg.write_text(f"api: {{socket_path: {sock}}}\n")
    run = cli("status", "--config", str(cfg), "--timeout", "2")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == f"coloc-agent status: no agent answers at {sock} (no such socket); {POINT}\n"


def test_status_at_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    dead = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))  # bound, never listening: what a killed agent leaves
        run = cli("status", "--socket", str(dead), "--timeout", "2")
    assert run.returncode == 1
    assert run.stderr == f"coloc-agent status: no agent answers at {dead} (connection refused); {POINT}\n"
    assert "UNAVAILABLE" not in run.stderr


def test_top_with_no_agent_is_one_line_saying_so(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"metrics: {{port: {port}}}\napi: {{socket_path: {tmp_path / 'agent.sock'}}}\n")
    run = cli("top", "--once", "--config", str(cfg), "--timeout", "2")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (f"coloc-agent top: no agent answers at http://127.0.0.1:{port}/metrics "
                          "(connection refused); point at one with --url URL, --socket PATH or --config FILE "
                          "(the agent's config)\n")


def test_a_bad_config_for_status_or_top_is_the_loaders_line(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("api: {socket_path: relative.sock}\n")
    for command in ("status", "top"):
        run = cli(command, "--config", str(cfg))
        assert run.returncode == 2
        assert run.stderr == (f"coloc-agent {command}: {cfg}: api.socket_path: must be absolute, "
                              "got 'relative.sock'\n")
    off = tmp_path / "off.yaml"
    off.write_text("metrics: {enabled: false}\n")
    run = cli("top", "--once", "--config", str(off))
    assert run.returncode == 2
    assert run.stderr == (f"coloc-agent top: {off} turns /metrics off (metrics.enabled: false), which top "
                          "reads; pass --url\n")


# -- a real agent ---------------------------------------------------------------------------------------

@pytest.mark.cgroups
@pytest.mark.slow
def test_status_and_top_find_the_agent_from_its_config(real_root: RealRoot, tmp_path: Path) -> None:
    port = free_port()
    sock = tmp_path / "run" / "a.sock"
    sock.parent.mkdir()
    cfg = agent_config(tmp_path, real_root.name, port, node={"cpus": 2},
                       api={"socket_path": str(sock)},
                       policies={"suppression": {"threshold_percent": 50}, "cpu_eviction": {"window_s": 10}})
    log = tmp_path / "agent.log"
    with running_agent(cfg, log):
        assert wait(sock.exists, 30), log.read_text()[-3000:]

        def answered() -> bool:
            return cli("status", "--config", str(cfg), "--json").returncode == 0

        assert wait(answered, 30), log.read_text()[-3000:]
        run = cli("status", "--config", str(cfg), "--json")
        rows = {s["name"]: (s.get("value", ""), s["source"]) for s in json.loads(run.stdout)["settings"]}
        assert set(rows) == MAPPED
        assert rows["suppression.threshold_percent"] == ("50", "yaml")
        assert rows["cpu_eviction.window_s"] == ("10", "yaml")  # the default value, set by the file
        assert {src for name, (_, src) in rows.items()
                if name not in ("suppression.threshold_percent", "cpu_eviction.window_s")} == {"default"}
        assert rows["suppression.policy"] == ("cpuset", "default")

        run = cli("status", "--config", str(cfg))
        assert run.returncode == 0, run.stderr
        lines = run.stdout[run.stdout.index("\nsettings\n"):].splitlines()
        assert any(ln.split() == ["suppression.threshold_percent", "50", "yaml"] for ln in lines), run.stdout
        assert any(ln.split() == ["memory_eviction.threshold_percent", "70", "default"] for ln in lines)
        assert any(ln.split() == ["memory_eviction.lower_percent", "-", "default"] for ln in lines)

        def framed() -> subprocess.CompletedProcess[str]:
            return cli("top", "--once", "--config", str(cfg))

        assert wait(lambda: framed().returncode == 0, 30), framed().stderr
        top = framed().stdout
        # the node's figures from GetStatus on the socket the config names (not the default one), the rest
        # from the /metrics port it names
        assert any(ln.startswith("node rel-node  lifecycle schedulable") for ln in top.splitlines()), top
        assert "api:" not in top, top
        assert f"http://127.0.0.1:{port}/metrics" in top, top
    # the agent is gone: the same command says so in one line
    run = cli("status", "--config", str(cfg), "--timeout", "2")
    assert run.returncode == 1
    assert run.stderr.startswith(f"coloc-agent status: no agent answers at {sock} ("), run.stderr
    assert len(run.stderr.splitlines()) == 1

