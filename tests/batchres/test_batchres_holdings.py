"""Every knob the agent can hold (the holders the code declares, `cgroups.holdings.HOLDERS`), held by a real
`coloc-agent run` process on real v1 cgroups, which is then SIGKILLed: a run with that feature off gives the
knob back; a value another writer set after the crash is left, and counted in /metrics. The kubelet is a
local HTTP server serving a PodList in the kubelet's format (tests/fixtures/kubelet)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from batchkit import POD, be_pod, write_list
from kit.agentproc import agent_config, get, kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.holdings import held
from kit.poll import holds, wait
from kit.ports import free_port
from kit.realcg import RealRoot

import agent.daemon.batch_limits
import agent.daemon.resource_qos
import agent.daemon.runtime  # every holder's module is imported by the agent's wiring
import agent.executors.apply  # noqa: F401
from cgroups.holdings import HOLDERS

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


@dataclass(frozen=True)
class Scenario:
    """How a real agent holds one holder's knob: the config with the feature on and off, the cgroups the
    kubelet would have made, the knob's file (below the test's root) and its value before the agent."""

    config: Callable[[Path, str, str, int, bool], Path]  # tmp, root, kubelet url, port, on -> config file
    made: tuple[str, ...]
    knob: str
    cgroup: str  # relative to the agent's root
    file: tuple[str, str]  # controller, path below the test's root
    before: str
    theirs: str
    journal: str  # below tmp_path


def _standalone(tmp: Path, root: str, url: str, port: int, on: bool) -> Path:
    return agent_config(tmp, f"{root}/agent", port, node={"cpus": 2}, cgroups={"cleanup_on_exit": False},
                        policies={"suppression": {"policy": "cfsQuota", "enabled": on}})


def _batch_limits(tmp: Path, root: str, url: str, port: int, on: bool) -> Path:
    limits = {"resync_s": 1} if on else {"enabled": False}
    return kubelet_node_config(tmp, root, url, resync_s=1, metrics_port=port, batch_limits=limits)


SCENARIOS = {
    "be_cpu_suppression": Scenario(_standalone, (), "cpu_quota", "besteffort",
                                   ("cpu", "agent/besteffort/cpu.cfs_quota_us"), "-1", "50000",
                                   "state/state.json.held"),
    "batch_limits": Scenario(_batch_limits, ("besteffort", "burstable", POD), "cpu_quota", POD,
                             ("cpu", f"{POD}/cpu.cfs_quota_us"), "-1", "20000", "state.json.held"),
}
# Holders this host cannot show, or whose scenario lives elsewhere, each with the reason.
ELSEWHERE = {
    "memory_qos": "cgroup v1 has no memory.min / memory.low: tests/memqos/test_memqos_restart_guest.py, in "
                  "the v2 + systemd guest",
    "cpu_burst": "tests/coexist/test_coexist_cpu_burst.py (a real agent SIGKILLed holding a burst, given "
                 "back by a run with CPU burst off)",
    "be_tier_memory_cap": "tests/batchres/test_batchres_tier.py (a real agent SIGKILLed capping the "
                          "tier: lifted by runs with batch limits or the cap off, another writer's left)",
    "yarn_limits": "no scenario yet with a real agent and the NodeManager's REST served locally",
}


def test_every_holder_the_code_declares_has_a_scenario_or_a_reason() -> None:
    assert set(HOLDERS) == set(SCENARIOS) | set(ELSEWHERE), sorted(HOLDERS)


def _read(root: RealRoot, s: Scenario) -> str:
    ctrl, path = s.file
    return (root.path(ctrl, "") / path).read_text().strip()


def _counter(port: int, name: str, labels: dict[str, str]) -> float:
    _, body = get(f"http://127.0.0.1:{port}/metrics", 5.0)
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in body.decode().splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("holder", sorted(SCENARIOS))
def test_a_knob_a_killed_agent_held_is_given_back_by_a_run_with_the_feature_off_unless_changed_since(
        holder: str, real_root: RealRoot, tmp_path: Path) -> None:
    if not real_root.hierarchy.is_v1("cpu") or not real_root.hierarchy.is_v1("memory"):
        pytest.skip("v1 files (the v2 guest: tests/memqos/test_memqos_restart_guest.py)")
    s = SCENARIOS[holder]
    for rel in s.made:
        real_root.mkcg(rel)
    port = free_port()
    journal = tmp_path / s.journal
    log = tmp_path / "agent.log"
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as kubelet:
        def held_then_killed() -> str:
            with running_agent(s.config(tmp_path, real_root.name, kubelet.url, port, True), log) as agent:
                assert wait(lambda: _held(real_root, s), 30), log.read_text()[-3000:]
                assert wait(lambda: held(journal).get((s.knob, s.cgroup)) == holder, 10), held(journal)
                value = _read(real_root, s)
                agent.send_signal(signal.SIGKILL)
                agent.wait(timeout=10)
            assert _read(real_root, s) == value, "the knob went with the agent"
            return value

        held_then_killed()
        with running_agent(s.config(tmp_path, real_root.name, kubelet.url, port, False), log) as again:
            assert wait(lambda: _read(real_root, s) == s.before, 30), log.read_text()[-3000:]
            given = {"holder": holder}
            assert wait(lambda: _counter(port, "coloc_holdings_given_back_total", given) >= 1, 15)
            assert holder not in held(journal).values()
            assert again.poll() is None
        held_then_killed()
        ctrl, path = s.file
        (real_root.path(ctrl, "") / path).write_text(s.theirs)  # another writer, while the agent was down
        with running_agent(s.config(tmp_path, real_root.name, kubelet.url, port, False), log) as again:
            if HOLDERS[holder].moving:  # the one exception (cgroups/holdings.py): any value found is its own
                assert wait(lambda: _read(real_root, s) == s.before, 30), log.read_text()[-3000:]
            else:
                left = {"knob": s.knob, "writer": "unknown"}
                assert wait(lambda: _counter(port, "coloc_holdings_left_total", left) >= 1, 30), \
                    log.read_text()[-3000:]
                assert holds(lambda: _read(real_root, s) == s.theirs, 1.5), "another writer's value changed"
            assert again.poll() is None


def _held(root: RealRoot, s: Scenario) -> Any:
    try:
        return _read(root, s) != s.before
    except OSError:
        return False
