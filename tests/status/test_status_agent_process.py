"""`coloc-agent status` and `/readyz` of the real agent process (`coloc-agent run`) on a private real cgroup
root, asked over its real unix socket and HTTP port. The kubelet cannot run here: a local HTTP server
(tests/kit/fakes/kubelet.py) serves the kubelet's `/pods` PodList from a checked-in fixture, and is stopped
(connection refused) to make the source stale."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import AgentProcess, agent_argv, agent_config, readyz
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.api.client import AgentClient

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STALE_AFTER_S = 1.5


class StatusAgent:
    """One `coloc-agent run` process; `status()` runs the real `coloc-agent status` CLI against it."""

    def __init__(self, tmp: Path, root: str, sources: dict[str, Any] | None = None,
                 state: dict[str, Any] | None = None) -> None:
        self.sock = tmp / "agent.sock"
        self.port = free_port()
        config = agent_config(
            tmp, root, self.port, node={"name": "status-node", "cpus": 2},
            cgroups={"driver": "cgroupfs", "cleanup_on_exit": None}, loop={"interval_s": 0.25},
            eviction={"dry_run": True}, state={"path": str(tmp / "state.json"), **(state or {})},
            sources=sources or None)
        self.process = AgentProcess(config, tmp / "agent.log")

    def start(self) -> StatusAgent:
        self.process.start()
        assert wait(self.sock.exists, 20), self.log()
        return self

    def log(self) -> str:
        return self.process.log()

    def stop(self) -> None:
        self.process.stop(15)

    def status(self, *extra: str) -> str:
        run = subprocess.run(agent_argv("status", "--socket", f"unix:{self.sock}", *extra),
                             capture_output=True, text=True, timeout=30, check=False)
        assert run.returncode == 0, run.stdout + run.stderr
        return run.stdout

    def status_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.status("--json"))
        return doc

    def readyz(self) -> tuple[int, dict[str, Any]]:
        return readyz(self.port)

    def ticked(self) -> bool:
        return int(self.status_json().get("tick", 0)) >= 2


@contextlib.contextmanager
def running(agent: StatusAgent) -> Iterator[StatusAgent]:
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()


def _waited_s(text: str) -> float:
    m = re.search(r"^waiting\s+for a scheduler's AckRecovery for (\d+\.\d)s", text, re.M)
    assert m, text
    return float(m.group(1))


def test_a_standalone_agent_is_schedulable_and_says_there_is_no_scheduler(real_root: RealRoot,
                                                                          tmp_path: Path) -> None:
    with running(StatusAgent(tmp_path, real_root.name)) as agent:
        assert wait(agent.ticked, 20), agent.log()
        text = agent.status()
        assert re.search(r"^lifecycle\s+SCHEDULABLE\b", text, re.M), text
        assert re.search(r"^scheduler\s+none configured", text, re.M), text
        assert "waiting" not in text, text
        doc = agent.status_json()
        assert doc["lifecycle"] == "SCHEDULABLE" and not doc.get("awaits_scheduler_ack", False)
        assert [s["name"] for s in doc["sources"]] == ["standalone"]
        # Through GetStatus: the fast path's mode and, when it polls, why the kernel's triggers were not used.
        reason = doc.get("fast_path_reason", "")
        assert doc["fast_path_mode"] == "off" and reason == "loop.fast_path is false", doc
        assert "fast path off (loop.fast_path is false)" in text, text
        code, body = agent.readyz()
        assert code == 200 and body["sources"]["standalone"]["stale"] is False, body


def test_a_cluster_agent_waits_for_the_scheduler_and_names_a_stale_source(real_root: RealRoot,
                                                                         tmp_path: Path) -> None:
    with FakeKubelet(FIXTURES / "kubelet" / "podlist-mixed.json") as kubelet:
        sources = {"kubelet": {"url": kubelet.url, "token_file": "", "timeout_s": 0.5, "resync_s": 0.5,
                               "stale_after_s": STALE_AFTER_S, "min_resync_gap_s": 0.1}}
        with running(StatusAgent(tmp_path, real_root.name, sources)) as agent:
            assert wait(agent.ticked, 20), agent.log()
            first = agent.status()
            assert re.search(r"^lifecycle\s+RECOVERING\b", first, re.M), first
            waited = _waited_s(first)
            assert wait(lambda: _waited_s(agent.status()) >= waited + 1.0, 10)
            second = agent.status()
            assert _waited_s(second) >= waited + 1.0, (first, second)
            assert re.search(r"^\s+kubelet\s+age \d+\.\ds\s+fresh", second, re.M), second
            doc = agent.status_json()
            assert doc["lifecycle"] == "RECOVERING" and doc["awaits_scheduler_ack"] is True
            assert "AckRecovery" in doc["waiting_for"] and float(doc["waiting_s"]) >= waited + 1.0
            code, body = agent.readyz()
            assert code == 200 and body["sources"]["kubelet"]["stale"] is False, body

            kubelet.stop()  # connection refused from now on
            stale_line = re.compile(r"^\s+kubelet\s+age (\d+\.\d)s\s+STALE\s+(.+)$", re.M)
            assert wait(lambda: bool(stale_line.search(agent.status())), 20), agent.status()
            m = stale_line.search(agent.status())
            assert m is not None
            assert float(m.group(1)) > STALE_AFTER_S and "kubelet" in m.group(2) and "old" in m.group(2), m[0]
            code, body = agent.readyz()
            src = body["sources"]["kubelet"]
            assert src["stale"] is True and src["age_s"] > STALE_AFTER_S and "old" in src["reason"], body
            assert "kubelet" in body["stale"], body

            async def ack() -> None:
                async with AgentClient(f"unix:{agent.sock.with_name('admin.sock')}") as c:
                    st = await c.status()
                    await c.ack_recovery(1, st.identity.incarnation, st.revision)

            asyncio.run(ack())
            after = agent.status()
            assert re.search(r"^lifecycle\s+SCHEDULABLE\b", after, re.M), after
            assert "AckRecovery for" not in after, after
