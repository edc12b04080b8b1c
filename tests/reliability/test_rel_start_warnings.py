"""Start-up warnings, one line each, from a real `coloc-agent run`: a config file that sets nothing (the agent
runs on every default), a `cgroups.root` that is not there with `setup_tiers: false`, a root with no BE
tier; `/readyz` names the directory that is missing, not "cgroup root / cannot be read"."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import agent_argv, agent_config, readyz, running_agent
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups]


def warnings(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if doc.get("level") == "warning":
                out.append(doc)
    return out


def warned(log: Path, words: str) -> list[dict[str, Any]]:
    return [w for w in warnings(log) if words in w["message"]]


def not_ready(port: int, words: str) -> str:
    """The body of a 503 /readyz that says `words` (once the agent has ticked), as JSON text."""
    def says() -> bool:
        code, body = readyz(port)
        return code == 503 and words in json.dumps(body)

    wait(says, 20)
    return json.dumps(readyz(port)[1])


def test_a_missing_root_is_said_at_start_and_by_readyz(real_root: RealRoot, tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/nothere", port,
                       cgroups={"setup_tiers": False, "cleanup_on_exit": False})
    log = tmp_path / "agent.log"
    with running_agent(cfg, log):
        reasons = not_ready(port, f"{real_root.name}/nothere does not exist")
        assert f"cgroup root (cgroups.root) {real_root.dirs('nothere')[0].parent}" in reasons or (
            f"{real_root.name}/nothere does not exist" in reasons), reasons
        assert "cgroup root / " not in reasons, reasons
        said = warned(log, "cgroups.root does not exist")
        assert len(said) == 1, log.read_text()[-3000:]
        assert said[0]["fields"]["root"] == f"{real_root.name}/nothere"
    assert not real_root.dirs("nothere")[0].exists(), "the agent made a root it was told not to"


def test_a_root_without_a_be_tier_is_said_at_start_and_by_readyz(real_root: RealRoot, tmp_path: Path) -> None:
    real_root.mkcg("agent")
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port,
                       cgroups={"setup_tiers": False, "cleanup_on_exit": False})
    log = tmp_path / "agent.log"
    with running_agent(cfg, log):
        reasons = not_ready(port, "agent/besteffort does not exist")
        assert "agent/besteffort does not exist" in reasons, reasons
        assert len(warned(log, "no BE tier under cgroups.root")) == 1, log.read_text()[-3000:]
        assert not warned(log, "cgroups.root does not exist")


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mount") is None,
                    reason="unshare or mount is not installed")
def test_an_empty_config_file_runs_on_every_default_and_says_so(tmp_path: Path) -> None:
    """Every default: state in /var/lib, sockets in /var/run, root `kubepods`, /metrics on 127.0.0.1:19316.
    Run in private mount and network namespaces (tmpfs over /var/lib and /run, a loopback of its own), so
    that it touches none of this machine's; `kubepods` is not made (`setup_tiers` is off by default)."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    log = tmp_path / "agent.log"
    argv = " ".join(f"'{a}'" for a in agent_argv("run", "--config", str(empty)))
    script = ("mount -t tmpfs none /var/lib && mount -t tmpfs none /run && "
              "(ip link set lo up 2>/dev/null || true) && exec " + argv)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        assert wait(lambda: warned(log, "the config file sets no setting") or proc.poll() is not None, 20)
        if proc.poll() is not None and "mount:" in log.read_text():
            pytest.skip(f"cannot make private namespaces here: {log.read_text()[-500:]}")
        said = warned(log, "the config file sets no setting")
        assert len(said) == 1, log.read_text()[-3000:]
        fields = said[0]["fields"]
        assert fields["cgroups.root"] == "kubepods" and fields["state.path"].startswith("/var/lib/"), fields
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
