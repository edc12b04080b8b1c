"""Real agent processes (`coloc-agent run`) on real sockets, each with its own node id, state file and
private cgroup root.

Allocations come from real sources: container cgroups created under the agent's root (found by the
agent's cgroup scanner) and admissions through the API. Every process and cgroup is removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.config.api import admin_socket_for
from kit.agentproc import agent_argv, layered, standalone, write_config
from kit.api import cid
from kit.realcg import RealRoot

YARN = "besteffort/hadoop-yarn"


def scheduled_node_config(workdir: Path, root: RealRoot, node_id: str, **sections: dict[str, Any] | None
                          ) -> Path:
    """The agent of the private node `<root>/<node_id>` (2 CPUs, 2Gi, 0.1 s ticks, no /metrics, evictions
    dry-run, the batch origin local), driven by a (test) scheduler over the API: it waits RECOVERING for
    AckRecovery. Its config, state and socket are `<workdir>/<node_id>.{yaml,json,sock}`; `sections` merged
    in (see `kit.agentproc.write_config`)."""
    base = standalone(workdir, f"{root.name}/{node_id}", None)
    return write_config(workdir / f"{node_id}.yaml", base, **layered({
        "node": {"name": node_id, "cpus": 2, "memory": "2Gi"},
        "cgroups": {"driver": "cgroupfs", "cleanup_on_exit": False},
        "loop": {"interval_s": 0.1},
        "eviction": {"dry_run": True},  # these agents are about the ledger, not about evicting
        "log": {"level": "warning", "format": "text"},
        "state": {"path": str(workdir / f"{node_id}.json"), "await_scheduler_ack": True},
        "api": {"socket_path": str(workdir / f"{node_id}.sock"), "bookmark_interval_s": 0.5},
        "batch": {"origin": "local"},
    }, sections))


class Agent:
    """One `coloc-agent run --config FILE` process managing the private node `<root>/<node_id>`.

    `settings` override the YAML (dotted keys, e.g. `{"loop.interval_s": 0.05}`)."""

    def __init__(self, root: RealRoot, workdir: Path, node_id: str, settings: dict[str, object] | None = None
                 ) -> None:
        self.root = root
        self.node_id = node_id
        self.socket = workdir / f"{node_id}.sock"
        self.state = workdir / f"{node_id}.json"
        self.log = workdir / f"{node_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = ""
        root.mkcg(f"{node_id}/{YARN}")
        dotted: dict[str, dict[str, Any]] = {}
        for key, value in (settings or {}).items():
            section, name = key.split(".", 1)
            dotted.setdefault(section, {})[name] = value
        self.config = scheduled_node_config(workdir, root, node_id, **dotted)

    @property
    def address(self) -> str:
        """The admin socket: recovery acknowledges, which the read socket refuses."""
        return admin_socket_for(str(self.socket))

    def launch(self) -> None:
        """Start the process; `wait_ready` completes the start (so many agents can boot at once)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(agent_argv("run", "--config", str(self.config)),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def _probe(self, deadline: float) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"agent {self.node_id} exited: {self.log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"agent {self.node_id} not ready: {self.log.read_text()[-2000:]}")
        if not self.socket.exists():
            return False
        with grpc.insecure_channel(f"unix:{self.socket}") as ch:
            try:
                m = pb_grpc.NodeAgentStub(ch).GetSnapshot(pb.GetSnapshotRequest(), timeout=2.0)
            except grpc.RpcError:
                return False
        if m.node.batch_allocatable.milli_cpu == 0:  # serving, but no batch budget computed yet
            return False
        self.incarnation = m.identity.incarnation
        return True

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Until the agent answers on its socket and has a batch budget; returns its incarnation."""
        deadline = time.monotonic() + timeout
        while not self._probe(deadline):
            time.sleep(0.05)
        return self.incarnation

    async def await_ready(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(self._probe, deadline):
            await asyncio.sleep(0.05)
        return self.incarnation

    def start(self) -> str:
        self.launch()
        return self.wait_ready()

    async def astart(self) -> str:
        """`start` for async tests: the event loop keeps running meanwhile."""
        self.launch()
        return await self.await_ready()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the socket file stays behind, as after a crash."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    # ---- the node's workloads -------------------------------------------------------------------------

    def add_container(self, app: int, seq: int) -> str:
        self.root.mkcg(f"{self.node_id}/{YARN}/{cid(app, seq)}")
        return f"yarn/{cid(app, seq)}"

    def remove_container(self, key: str) -> None:
        rel = f"{self.node_id}/{YARN}/{key.removeprefix('yarn/')}"
        for d in self.root.dirs(rel):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(d)

    def containers(self) -> set[str]:
        """Ground truth from the cgroup tree itself."""
        d = self.root.path("cpu", f"{self.node_id}/{YARN}")
        return {f"yarn/{p.name}" for p in d.iterdir() if p.is_dir()}


def start_all(agents: list[Agent]) -> None:
    for a in agents:
        a.launch()
    for a in agents:
        a.wait_ready()


def stop_all(agents: list[Agent]) -> None:
    for a in agents:
        if a.proc is not None:
            a.proc.send_signal(signal.SIGCONT)
            a.proc.terminate()
    for a in agents:
        a.stop()
