"""The shipped DaemonSet config, unchanged, on a systemd-driver node with pure cgroup v2 (the test guest).

`deploy/base/config.yaml` names the root `kubepods`; the kubelet's systemd driver makes `kubepods.slice`, its
tiers and pods as slices and each container a scope (made here through systemd, as the runtime asks for
them). The agent must find the tiers, suppress BE and keep it suppressed across systemd's re-application
(`daemon-reload`, a new pod's units), leave no value it wrote in any cgroup below the tier when it exits,
and say it is not ready on a node where there is no tier to act on. (A BE memory hog evicted on this layout:
tests/vm/guest/test_guest_systemd_eviction.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kit.agentproc import readyz, sample
from kit.poll import wait
from kit.realcg import cpus
from kit.systemd import CGROUP2, SystemdPods, read, systemctl, systemd_v2_host

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "base" / "config.yaml"
PORT = 19316  # the shipped config's
KNOBS = ("cpuset.cpus", "cpu.max", "cpu.weight", "cpu.idle", "memory.max", "memory.high")


def _below(tier: str) -> dict[str, str]:
    """Every knob file of every cgroup below the tier."""
    out = {}
    for d in sorted(p for p in (CGROUP2 / tier).rglob("*") if p.is_dir()):
        for k in KNOBS:
            f = d / k
            if f.exists():
                out[str(f.relative_to(CGROUP2))] = f.read_text().strip()
    return out


class Agent:
    def __init__(self, log: Path) -> None:
        self.log = log
        env = {**os.environ, "HOST_IP": "127.0.0.1", "NODE_NAME": "guest-node"}
        with log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--config", str(CONFIG)],
                                         stdout=out, stderr=out, env=env, cwd=REPO)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise AssertionError("the agent did not exit on SIGTERM within 90 s") from None


def test_shipped_config_finds_the_systemd_tiers_suppresses_and_leaves_nothing_below_the_tier(
        systemd_pods: SystemdPods, tmp_path: Path) -> None:
    systemd_pods.scope("burstable", str(uuid.uuid4()))  # an HP pod
    systemd_pods.scope("besteffort", str(uuid.uuid4()), ["sh", "-c", "while :; do :; done"])
    tier = systemd_pods.tier_rel("besteffort")
    before = _below(tier)
    every = cpus(read("", "cpuset.cpus.effective"))
    agent = Agent(tmp_path / "agent.log")
    try:
        assert wait(lambda: readyz(PORT)[0] == 200, 120), (tmp_path / "agent.log").read_text()[-3000:]
        assert wait(lambda: 0 < len(cpus(read(tier, "cpuset.cpus"))) < len(every), 60), "BE never suppressed"
        held = read(tier, "cpuset.cpus")
        # systemd, busy under emulation, may miss the agent's first calls: the value is then handed to it
        # at a later tick (cgroups/writer.py), before which a reload could undo it.
        assert wait(lambda: (sample(PORT, "coloc_systemd_property_sets_total") or 0) >= 1, 60), \
            (tmp_path / "agent.log").read_text()[-3000:]
        systemctl("daemon-reload")
        assert read(tier, "cpuset.cpus") == held, "daemon-reload undid the BE cpuset"
        systemd_pods.scope("besteffort", str(uuid.uuid4()))
        assert read(tier, "cpuset.cpus") == held, "a new pod's units undid the BE cpuset"
        rc = agent.stop()
    finally:
        if agent.proc.poll() is None:
            agent.stop()
    text = (tmp_path / "agent.log").read_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    after = _below(tier)
    # Every cgroup below the tier holds what it held before, or (made since) the kernel's defaults: the agent
    # wrote nothing below the tier on v2, and nothing is left behind.
    changed = {k: (before.get(k), v) for k, v in after.items() if k in before and before[k] != v}
    assert not changed, changed
    fresh = {k: v for k, v in after.items() if k not in before and k.endswith(("cpuset.cpus", "cpu.idle"))}
    assert all(v in ("", "0") for v in fresh.values()), fresh
    assert cpus(read(tier, "cpuset.cpus") or read("", "cpuset.cpus.effective")) == every


def test_no_tier_to_act_on_is_not_ready(tmp_path: Path) -> None:
    """No kubepods slice on this node (or the wrong root): red /readyz saying why, not a silent no-op."""
    assert not (CGROUP2 / "kubepods.slice").exists() and not (CGROUP2 / "kubepods").exists()
    agent = Agent(tmp_path / "agent.log")
    try:
        log = tmp_path / "agent.log"
        assert wait(lambda: (sample(PORT, "coloc_ticks_total") or 0) >= 2, 120), log.read_text()[-3000:]
        code, body = readyz(PORT)
        assert code == 503, body
        assert body["reason"].startswith("no BE tier to act on"), body
    finally:
        agent.stop()
