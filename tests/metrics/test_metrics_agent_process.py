"""The real agent process (`coloc-agent run`) on a private cgroup root, scraped by a real Prometheus server,
asked for its status over its real unix socket, and stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from kit.agentproc import AgentProcess, agent_argv, agent_config
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from promserver import PrometheusServer

from agent.api.client import AgentClient
from agent.demo.spawn import workload_argv
from agent.state import AdmitRequest, AdmitResult, Refusal
from qos.model import Resources, Source

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


def _config(tmp_path: Path, root: str, port: int) -> Path:
    return agent_config(
        tmp_path, root, port, node={"name": "prom-node", "cpus": 2},
        cgroups={"cleanup_on_exit": None}, loop={"interval_s": 0.5, "fast_path": None},
        # A scheduler drives this standalone node over the API: it waits RECOVERING for an AckRecovery.
        state={"path": str(tmp_path / "state.json"), "await_scheduler_ack": True},
        standalone={"workloads": [{"cgroup": "besteffort/batch", "priority": 3000, "milli_cpu": 500}]})


def test_agent_process_is_scraped_by_prometheus_and_answers_status(
        real_root: RealRoot, tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    real_root.mkcg("besteffort/batch")
    real_root.spawn("besteffort/batch", workload_argv("burn"))
    port = free_port()
    process = AgentProcess(_config(tmp_path, real_root.name, port), tmp_path / "agent.log")
    agent = process.start()
    try:
        assert wait((tmp_path / "agent.sock").exists, 20), (tmp_path / "agent.log").read_text()
        prom = prometheus([f"127.0.0.1:{port}"], scrape_interval="1s")
        prom.wait_for_scrape()
        prom.wait_until("coloc_ticks_total", lambda v: (v or 0) >= 2, 20)
        assert prom.value("coloc_node_cpu_capacity_cores") == 2.0
        assert prom.value("coloc_node_memory_capacity_bytes") == float(1 << 30)
        assert prom.value('coloc_workloads{tier="besteffort",source="local"}') == 1.0
        # cpuset + cpu.idle is the default: BE confined to one CPU of the private 2-CPU node.
        prom.wait_until("coloc_be_cpuset_cpus", lambda v: v == 1.0, 20)
        assert prom.value("coloc_be_cpu_idle") == 1.0
        assert prom.value('up{job="coloc-agent"}') == 1.0

        status = subprocess.run(agent_argv("status", "--json", "--socket", f"unix:{tmp_path / 'agent.sock'}"),
                                capture_output=True, text=True, timeout=30, check=True)
        doc = json.loads(status.stdout)
        assert "prom-node" in json.dumps(doc)

        async def admit_while_recovering() -> AdmitResult:
            async with AgentClient(f"unix:{tmp_path / 'admin.sock'}") as client:  # mutations: admin socket
                return await client.admit(AdmitRequest("local/besteffort/new", "app-1", Source.LOCAL,
                                                       Resources(100, 1 << 20)), 1)

        refused = asyncio.run(admit_while_recovering())  # no scheduler has acked: the node is RECOVERING
        assert not refused.accepted and refused.refusal is Refusal.NOT_SCHEDULABLE
        prom.wait_until('coloc_admissions_refused_total{reason="NOT_SCHEDULABLE"}', lambda v: v == 1.0, 20)
        assert int(doc["applications"]) == 1, "the BE workload is an application in the ledger"

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(15) == 0
        assert not (tmp_path / "agent.sock").exists(), "the socket should be removed on a clean stop"
        assert (tmp_path / "state.json").exists()
        lines = (tmp_path / "agent.log").read_text().splitlines()
        assert all(json.loads(line)["level"] for line in lines if line.startswith("{"))
    finally:
        if agent.poll() is None:
            process.kill()
