"""Real agent processes on real sockets, each with its own node id, state file and private cgroup root.

Allocations come from real sources: container cgroups created under the agent's root (found by the
agent's cgroup scanner) and admissions through the API. Every process and cgroup is removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from apihelp import cid
from realcg import RealRoot

AGENT = Path(__file__).resolve().parent / "agent_proc.py"
YARN = "besteffort/hadoop-yarn"


class Agent:
    def __init__(self, root: RealRoot, workdir: Path, node_id: str, *opts: str) -> None:
        self.root = root
        self.node_id = node_id
        self.socket = workdir / f"{node_id}.sock"
        self.state = workdir / f"{node_id}.json"
        self.opts = opts
        self.proc: subprocess.Popen[str] | None = None
        self.incarnation = ""
        root.mkcg(f"{node_id}/{YARN}")

    @property
    def address(self) -> str:
        return str(self.socket)

    def launch(self) -> None:
        """Start the process; `wait_ready` completes the start (so many agents can boot at once)."""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(AGENT),
                "--node-id",
                self.node_id,
                "--cgroup-root",
                f"{self.root.name}/{self.node_id}",
                "--socket",
                str(self.socket),
                "--state",
                str(self.state),
                *self.opts,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("READY "), f"agent {self.node_id} did not start: {line!r}"
        self.incarnation = line.split()[1]
        return self.incarnation

    def start(self) -> str:
        self.launch()
        return self.wait_ready()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
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
