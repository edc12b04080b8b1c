"""Start a real `coloc-agent run` process on a private cgroup root and read its metrics over HTTP."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml


def agent_config(tmp_path: Path, root: str, port: int, **extra: Any) -> Path:
    cfg: dict[str, Any] = {
        "node": {"name": "rel-node", "cpus": 1, "memory": "1Gi", "scope": "cgroup-root"},
        "cgroups": {"root": root, "setup_tiers": True, "cleanup_on_exit": True},
        "loop": {"interval_s": 0.2, "fast_path": False},
        "metrics": {"bind": "127.0.0.1", "port": port},
        "state": {"path": str(tmp_path / "state" / "state.json")},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
        "log": {"format": "json"},
    }
    for section, values in extra.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    (tmp_path / "state").mkdir(exist_ok=True)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig at `path` for the API server at `server` (a local fake: it checks no token)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": "test-token"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    return path


def get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()


def metric(port: int, name: str, timeout: float = 5.0) -> float:
    _, body = get(f"http://127.0.0.1:{port}/metrics", timeout)
    for line in body.decode().splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@contextmanager
def running_agent(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The agent process, stopped with SIGTERM (then SIGKILL) on the way out."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--config", str(config)],
                                stdout=out, stderr=out)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def proc_status(pid: int, key: str) -> str:
    """A field of /proc/PID/status (e.g. Threads, VmHWM); "?" when it has none."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return "?"
