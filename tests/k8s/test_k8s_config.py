"""Config of the Kubernetes / YARN side: loaded through the agent's loader, every error names its field."""

from __future__ import annotations

import pytest

from agent.config.load import ConfigError, from_mapping
from agent.config.sources import SourcesConfig


def test_defaults_and_a_full_mapping() -> None:
    d = SourcesConfig()
    assert (d.kubelet.url, d.kubelet.resync_s, d.yarn.enabled, d.reporting.mode) == (
        "https://127.0.0.1:10250",
        10.0,
        False,
        "annotation",
    )
    cfg = from_mapping(
        SourcesConfig,
        {
            "kubelet": {
                "url": "http://127.0.0.1:10255",
                "token_file": "",
                "timeout_s": 2,
                "stale_after_s": 30,
            },
            "yarn": {"enabled": True, "url": "http://localhost:8042", "priority": 5100},
            "kube_api": {"kubeconfig": "/etc/kubeconfig", "evicted_memory_s": 300, "evict_non_be": False},
            "reporting": {"mode": "off"},
        },
    )
    assert cfg.kubelet.timeout_s == 2.0 and cfg.yarn.priority == 5100 and cfg.reporting.mode == "off"
    assert (cfg.yarn.label_key, cfg.yarn.label_value) == ("app.kubernetes.io/component", "node-manager")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kubelet": {"url": "ftp://x"}}, "sources.kubelet.url"),
        ({"kubelet": {"url": "https://h:99999"}}, "sources.kubelet.url"),
        ({"kubelet": {"timeout_s": 0}}, "sources.kubelet.timeout_s"),
        ({"kubelet": {"stale_after_s": 5}}, "sources.kubelet.stale_after_s"),
        (
            {"kubelet": {"ca_file": "/ca", "insecure_skip_verify": True}},
            "sources.kubelet.insecure_skip_verify",
        ),
        ({"kubelet": {"max_body_bytes": 10}}, "sources.kubelet.max_body_bytes"),
        ({"yarn": {"port": 0}}, "sources.yarn.port"),
        ({"yarn": {"discovery_label": "no-equals"}}, "sources.yarn.discovery_label"),
        ({"yarn": {"enabled": True}, "kubelet": {"enabled": False}}, "sources.yarn.url"),
        ({"yarn": {"scheme": "gopher"}}, "yarn.scheme"),
        ({"kube_api": {"evicted_memory_s": -1}}, "sources.kube_api.evicted_memory_s"),
        ({"kube_api": {"event_component": "Not A Label"}}, "sources.kube_api.event_component"),
        ({"reporting": {"mode": "carrier-pigeon"}}, "reporting.mode"),
        ({"reporting": {"resync_s": 1}}, "sources.reporting.resync_s"),
        ({"reporting": {"priority_class": "koord-best"}}, "sources.reporting.priority_class"),
        ({"reporting": {"mode": "annotation"}, "kube_api": {"enabled": False}}, "sources.reporting.mode"),
        ({"kubelet": {"timeout": 3}}, "kubelet.timeout"),
    ],
)
def test_errors_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        from_mapping(SourcesConfig, data, "sources")
