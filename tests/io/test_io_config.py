"""The `io:` section: on by default, every bad value refused with the field named, and the shipped configs
guard the disk (the DaemonSet's through the host's /var/lib mounted at /host/var/lib)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.config.agent import AgentConfig, load_config
from agent.config.io import DEFAULT_PATHS, IoConfig
from agent.config.load import ConfigError
from qos.model import IoCap

REPO = Path(__file__).resolve().parents[2]


def _load(tmp_path: Path, io: object) -> AgentConfig:
    f = tmp_path / "agent.yaml"
    f.write_text(yaml.safe_dump({"io": io}))
    return load_config(f)


def test_the_guard_is_on_by_default_on_the_node_s_usual_disks() -> None:
    io = AgentConfig().io
    assert io.enabled and io.devices == () and io.paths == DEFAULT_PATHS
    assert "/var/lib/kubelet" in io.paths and "/var/lib/containerd" in io.paths
    assert io.policy.floor_mbps == 10.0 and io.policy.floor_read_mbps == 2.0 and io.policy.evict is False
    assert io.policy.floor == IoCap(rbps=2_000_000, wbps=10_000_000, riops=400, wiops=400)


@pytest.mark.parametrize(("io", "words"), [
    ({"devices": ["sda"]}, "io.devices[0]: block device must be MAJ:MIN"),
    ({"devices": ["8:0", "../8:1"]}, "io.devices[1]: block device must be MAJ:MIN"),
    ({"paths": ["var/lib"]}, "io.paths[0]: must be an absolute path"),
    ({"host_root": "host"}, "io.host_root: must be an absolute path"),
    ({"host_root": "/host/../etc"}, "io.host_root: must be an absolute path without '..'"),
    ({"poll_s": 0.5, "window_s": 0.2}, "io.window_s: must be >= io.poll_s"),
    ({"poll_s": 0}, "io.poll_s: must be in"),
    ({"poll_s": 0.05, "calm_poll_s": 0.02}, "io.calm_poll_s: must be >= io.poll_s"),
    ({"poll_s": 0.05, "stall_window_s": 0.02}, "io.stall_window_s: must be in [io.poll_s, io.window_s]"),
    ({"window_s": 0.3, "stall_window_s": 0.5}, "io.stall_window_s: must be in [io.poll_s, io.window_s]"),
    ({"enabled": "yes"}, "io.enabled"),
    ({"policy": {"floor_mbps": -1}}, "io.policy.floor_mbps: must be in"),
    ({"policy": {"idle_s": "soon"}}, "io.policy.idle_s"),
    ({"policy": {"evict": 1}}, "io.policy.evict"),
    ({"policy": {"bogus": 1}}, "bogus"),
])
def test_bad_io_settings_are_refused_naming_the_field(tmp_path: Path, io: dict[str, object],
                                                      words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        _load(tmp_path, io)


def test_good_io_settings_load(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"devices": ["254:16"], "host_root": "/host",
                           "policy": {"floor_mbps": 5, "floor_iops": 100, "evict": True}})
    assert cfg.io == IoConfig(devices=("254:16",), host_root="/host",
                              policy=cfg.io.policy)
    assert cfg.io.policy.floor.wbps == 5_000_000 and cfg.io.policy.floor.wiops == 100 and cfg.io.policy.evict


@pytest.mark.parametrize("path", ["examples/standalone.yaml", "deploy/base/config.yaml",
                                  "deploy/overlays/koordinator/config.yaml",
                                  "deploy/overlays/replace-koordlet/config.yaml"])
def test_the_shipped_configs_guard_the_disk(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_IP", "10.0.0.5")  # the DaemonSet's downward API
    io = load_config(REPO / path).io
    assert io.enabled
    if path.startswith("deploy"):
        assert io.host_root == "/host" and "/var/lib/kubelet" in io.paths
        daemonset = yaml.safe_load((REPO / "deploy/base/daemonset.yaml").read_text())
        spec = daemonset["spec"]["template"]["spec"]
        mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "var-lib")
        volume = next(v for v in spec["volumes"] if v["name"] == "var-lib")
        assert mount == {"name": "var-lib", "mountPath": "/host/var/lib", "readOnly": True}
        assert volume["hostPath"]["path"] == "/var/lib"
    else:
        assert io.paths == ("/var/lib",)
