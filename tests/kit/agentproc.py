"""A real `coloc-agent` process on a private cgroup root: its config, its start and stop, and what it says
over HTTP (`/metrics`, `/healthz`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families


def agent_argv(*args: str) -> list[str]:
    """`coloc-agent ARGS` as this interpreter runs it (the checkout's agent, whatever is on PATH)."""
    return [sys.executable, "-m", "agent.cli", *args]


def layered(*layers: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any] | None]:
    """Config sections, each layer over the ones before it key by key; a None section or value is kept
    (for `write_config` to drop)."""
    out: dict[str, dict[str, Any] | None] = {}
    for layer in layers:
        for section, values in layer.items():
            before = out.get(section)
            out[section] = None if values is None else {**(before or {}), **values}
    return out


def write_config(path: Path, cfg: dict[str, Any], **sections: dict[str, Any] | None) -> Path:
    """`cfg` written as YAML at `path`, each of `sections` merged into its section key by key (None drops
    the section, and a key whose value is None drops that key: the agent's default then)."""
    for section, values in sections.items():
        if values is None:
            cfg.pop(section, None)
        else:
            merged = {**cfg.get(section, {}), **values}
            cfg[section] = {key: value for key, value in merged.items() if value is not None}
    path.write_text(yaml.safe_dump(cfg))
    return path


def standalone(tmp_path: Path, root: str, port: int | None) -> dict[str, Any]:
    """The sections of a standalone agent (no kubelet, no API server) on `root`, /metrics on `port` (off with
    None), its state and socket in `tmp_path`."""
    return {
        "node": {"name": "rel-node", "cpus": 1, "memory": "1Gi", "scope": "cgroup-root"},
        "cgroups": {"root": root, "setup_tiers": True, "cleanup_on_exit": True},
        "loop": {"interval_s": 0.2, "fast_path": False},
        "metrics": {"enabled": False} if port is None else {"bind": "127.0.0.1", "port": port},
        "state": {"path": str(tmp_path / "state" / "state.json")},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
        "log": {"format": "json"},
    }


def agent_config(tmp_path: Path, root: str, port: int | None, **extra: Any) -> Path:
    """The `standalone` agent's config at `tmp_path/agent.yaml`; `extra` sections merged in (see
    `write_config`)."""
    (tmp_path / "state").mkdir(exist_ok=True)
    return write_config(tmp_path / "agent.yaml", standalone(tmp_path, root, port), **extra)


def node_config(tmp_path: Path, root: str, *, metrics_port: int | None = None, **sections: Any) -> Path:
    """The agent of a Kubernetes node ("node-a", 2 CPUs, 4Gi, the cgroupfs driver below `root`, the batch
    origin from the Node's annotation, 0.5 s ticks, quick evictions), its state and socket in `tmp_path`,
    /metrics on `metrics_port` (off without one); `sections` (its `sources` above all) merged in."""
    return write_config(tmp_path / "agent.yaml", {
        "node": {"name": "node-a", "cpus": 2, "memory": "4Gi"},
        "cgroups": {"root": root, "driver": "cgroupfs"},
        "loop": {"interval_s": 0.5},
        "eviction": {"grace_period_s": 1, "rate_per_minute": 60},
        "batch": {"origin": "annotation"},
        "state": {"path": str(tmp_path / "state.json")},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
        "metrics": {"enabled": False} if metrics_port is None else {"port": metrics_port},
        "log": {"format": "json"},
    }, **sections)


def kubelet_node_config(tmp_path: Path, root: str, kubelet_url: str, *, resync_s: float = 30,
                        metrics_port: int | None = None, **sections: Any) -> Path:
    """`node_config`'s node with the kubelet as its only source (no API server, nothing reported), evictions
    dry-run and the batch origin left to the agent's default; `sections` merged in."""
    sources = {"kubelet": {"url": kubelet_url, "token_file": "", "timeout_s": 1, "resync_s": resync_s,
                           "stale_after_s": 60},
               "kube_api": {"enabled": False}, "reporting": {"mode": "off"}}
    return node_config(tmp_path, root, metrics_port=metrics_port,
                       **{"eviction": {"dry_run": True}, "batch": None, "sources": sources, **sections})


def stop(proc: subprocess.Popen[Any], timeout: float = 20.0) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` s; its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            # Once, beside `stress-ng --cpu 2` and the suite's two workers, a killed agent was not reaped
            # within 10 s (an exit waiting on the kernel, e.g. cgroup locks other tests hold): wait longer.
            proc.wait(timeout=60)
    return int(proc.returncode)


class AgentProcess:
    """`coloc-agent run --config CONFIG`, its output appended to `log`; `start` again after `stop` or
    `kill` is a restart on the same state file and socket."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(agent_argv("run", "--config", str(self.config)),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        return self.proc

    def stop(self, timeout: float = 20.0) -> int | None:
        return None if self.proc is None else stop(self.proc, timeout)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log(self, last: int = 3000) -> str:
        """The last `last` characters of its output."""
        return self.log_path.read_text()[-last:] if self.log_path.exists() else ""


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


def get_json(url: str, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    """`get` of a JSON object (the agent's /healthz, /readyz): status code and the object."""
    code, body = get(url, timeout)
    doc = json.loads(body or b"{}")
    return code, doc if isinstance(doc, dict) else {}


def readyz(port: int) -> tuple[int, dict[str, Any]]:
    """The agent's /readyz: status code and JSON body; (0, {}) while it does not answer."""
    try:
        return get_json(f"http://127.0.0.1:{port}/readyz", timeout=3)
    except (OSError, ValueError):
        return 0, {}


def samples(port: int, timeout: float = 5.0) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the agent's /metrics: name -> its labels (sorted pairs) -> value; {} while it does
    not answer."""
    try:
        _, body = get(f"http://127.0.0.1:{port}/metrics", timeout)
    except OSError:
        return {}
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
    return out


def sample(port: int, name: str, **labels: str) -> float | None:
    """The sample `name` with exactly these `labels` on /metrics; None when there is none (yet)."""
    return samples(port).get(name, {}).get(tuple(sorted(labels.items())))


@contextmanager
def running_agent(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The agent process, stopped with SIGTERM (then SIGKILL) on the way out."""
    agent = AgentProcess(config, log)
    proc = agent.start()
    try:
        yield proc
    finally:
        agent.stop()


def proc_status(pid: int, key: str) -> str:
    """A field of /proc/PID/status (e.g. Threads, VmHWM); "?" when it has none."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return "?"


def proc_kib(pid: int, key: str) -> int:
    """A size of /proc/PID/status (VmRSS, VmHWM) in KiB; 0 when it has none."""
    value = proc_status(pid, key).split()
    return int(value[0]) if value and value[0].isdigit() else 0


@contextmanager
def scraping(port: int, n: int) -> Iterator[list[int]]:
    """`n` threads scraping the agent's /metrics back to back for the duration of the block; yields how many
    scrapes each has had answered."""
    stop = threading.Event()
    answered = [0] * n

    def scrape(i: int) -> None:
        while not stop.is_set():
            try:
                get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                answered[i] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=scrape, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        yield answered
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
