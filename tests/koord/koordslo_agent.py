"""A real `coloc-agent run` beside a fake Kubernetes API server (tests/kit/fakes/apiserver.py, which serves
the Node and Koordinator's NodeSLO as the real API server sends them), and what the tests read back from it:
`coloc-agent status` (the real CLI over the agent's unix socket)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.agentproc import agent_argv, kubeconfig, node_config

NODESLO = ("nodeslos", "node-a")


def nodeslo(rv: str, **strategy: Any) -> dict[str, Any]:
    """A NodeSLO as koord-manager writes it (`slo.koordinator.sh/v1alpha1`), named after the node."""
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": NODESLO[1], "resourceVersion": rv},
        "spec": {"resourceUsedThresholdWithBE": strategy},
    }


def slo_agent_config(tmp: Path, root: str, api_url: str, *, resync_s: float, metrics_port: int | None = None,
                     policies: dict[str, Any] | None = None) -> Path:
    """Standalone workloads (no kubelet), the NodeSLO read every `resync_s`, nothing written to the Node."""
    return node_config(
        tmp, root, metrics_port=metrics_port, node={"scope": "cgroup-root"}, cgroups={"setup_tiers": True},
        eviction=None, batch=None, metrics={} if metrics_port is None else {"bind": "127.0.0.1"},
        policies=policies or {}, sources={
            "kubelet": {"enabled": False},
            "kube_api": {"kubeconfig": str(kubeconfig(tmp / "kubeconfig", api_url))},
            "reporting": {"mode": "off"},
            "nodeslo": {"enabled": True, "resync_s": resync_s},
        })


def status(sock: Path, *, as_json: bool) -> tuple[int, str]:
    """`coloc-agent status [--json] --socket SOCK`: exit code and stdout (stderr when it failed)."""
    run = subprocess.run(agent_argv("status", "--socket", str(sock), *(["--json"] if as_json else [])),
                         capture_output=True, text=True, timeout=20, check=False)
    return run.returncode, run.stdout if run.returncode == 0 else run.stderr


def settings(sock: Path) -> dict[str, tuple[str, str]]:
    """Each policy setting `status --json` reports: name -> (value, source); {} while the agent is not up."""
    code, out = status(sock, as_json=True)
    if code != 0:
        return {}
    return {s["name"]: (s.get("value", ""), s.get("source", "")) for s in json.loads(out).get("settings", [])}


def threshold_is(sock: Path, value: str, source: str) -> Callable[[], bool]:
    """Whether `status` shows `suppression.threshold_percent` with this value and source."""
    return lambda: settings(sock).get("suppression.threshold_percent") == (value, source)


