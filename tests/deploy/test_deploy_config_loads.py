"""The DaemonSet's ConfigMap holds a config the agent itself accepts, with the cluster sources on."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent.config import load_config

REPO = Path(__file__).resolve().parents[2]


def test_daemonset_config_loads_with_the_cluster_sources_on(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "daemonset.yaml").read_text()) if d]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    cfg = load_config(path)
    assert cfg.cgroups.root == "kubepods"
    assert cfg.sources.kubelet.enabled and cfg.sources.kube_api.enabled
    assert cfg.sources.reporting.mode == "annotation"
    assert cfg.batch.origin == "annotation"
    assert cfg.api.socket_path == "/var/run/coloc-agent/agent.sock"
    assert cfg.metrics.port == 9316
