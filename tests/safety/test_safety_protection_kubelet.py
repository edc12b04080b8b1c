"""Classification from the kubelet's `/pods`: the PodList (the kubelet's own format, served over HTTP by the
local fake kubelet, since a real kubelet cannot run here) through the real KubeletSource and, from a YAML
config file, through the agent's own wiring."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import yaml
from kit.fakes.kubelet import FakeKubelet
from protectkit import BATCH, HP, PODLIST, PROTECTED, fetch

from agent.config.agent import load_config
from agent.config.load import ConfigError
from agent.daemon.runtime import make_sources
from agent.sources.kubelet import parse_pod_list
from cgroups.layout import Layout
from qos.protection import ProtectionConfig

REASONS = {
    "kube-proxy-7xk2p": "priority 2000001000 >= 2000000000",
    "calico-node-q8m4d": "priority 2000001000 >= 2000000000",
    "fluent-bit-h2k9z": "DaemonSet pod",
    "node-exporter-node-a": "static pod (config.source file)",
    "trainer-opted-out-0": "annotation coloc-agent.io/protected",
    "kube-state-metrics-6b9f7c-m4d2x": "namespace kube-system",
}


async def test_protected_pods_are_never_be_and_say_why() -> None:
    src = await fetch()
    by_name = {w.name: w for w in src.workloads}
    info = {p.name: p for p in src.pods.values()}
    for name in PROTECTED:
        w = by_name[name]
        assert (w.protected, w.be) == (True, False), name
        assert info[name].protected_by == REASONS[name]
    for name in BATCH:
        assert (by_name[name].protected, by_name[name].be) == (False, True), name
        assert info[name].protected_by == ""
    (web,) = HP
    assert (by_name[web].protected, by_name[web].be) == (False, False)
    # Still BestEffort pods in the BestEffort cgroup tier: only the BE classification changes.
    assert by_name["kube-proxy-7xk2p"].cgroup.startswith("besteffort/")
    assert info["trainer-opted-out-0"].koord_qos == "BE"


async def test_settings_change_the_classification() -> None:
    src = await fetch(ProtectionConfig(namespaces=(), daemonsets=False))
    protected = {w.name for w in src.workloads if w.protected}
    # kube-proxy and calico stay protected by priority, the static pod and the opt-out by their own marks.
    assert protected == PROTECTED - {"fluent-bit-h2k9z", "kube-state-metrics-6b9f7c-m4d2x"}
    now_be = BATCH | {"fluent-bit-h2k9z", "kube-state-metrics-6b9f7c-m4d2x"}
    assert {w.name for w in src.workloads if w.be} == now_be
    src = await fetch(ProtectionConfig(priority_threshold=5000, namespaces=("batch",)))
    # Every batch pod is protected now (priority 5500 or namespace batch); kube-system no longer is.
    assert {w.name for w in src.workloads if w.be} == {"kube-state-metrics-6b9f7c-m4d2x"}


async def test_be_label_on_a_protected_pod_is_logged_once_per_pod(caplog: pytest.LogCaptureFixture) -> None:
    with FakeKubelet(PODLIST) as kubelet, caplog.at_level(logging.WARNING, "coloc.sources.kubelet"):
        from agent.config.sources import KubeletConfig
        from agent.sources.kubelet import KubeletSource
        src = KubeletSource(KubeletConfig(url=kubelet.url, token_file="", timeout_s=2), Layout("cgroupfs"))
        for _ in range(3):
            await src.refresh()
    notes = [r.getMessage() for r in caplog.records if "koordinator.sh/qosClass=BE" in r.getMessage()]
    assert len(notes) == 1, notes
    assert "batch/trainer-opted-out-0" in notes[0] and "annotation coloc-agent.io/protected" in notes[0]
    w = next(w for w in src.workloads().workloads if w.name == "trainer-opted-out-0")
    assert w.protected and not w.be


def _doc() -> dict[str, object]:
    return json.loads(PODLIST.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("metadata", "annotations"), ["a"], "metadata.annotations: expected an object, got list"),
    (("metadata", "annotations", "coloc-agent.io/protected"), True,
     "metadata.annotations: 'coloc-agent.io/protected' is not a string"),
    (("metadata", "annotations", "big"), "x" * (256 * 1024), "metadata.annotations: 262"),
    (("metadata", "ownerReferences"), {"kind": "DaemonSet"},
     "metadata.ownerReferences: expected a list, got dict"),
    (("metadata", "ownerReferences", 0), "DaemonSet",
     "metadata.ownerReferences[0]: expected an object, got str"),
    (("metadata", "ownerReferences", 0, "kind"), 7,
     "metadata.ownerReferences[0].kind: expected a string, got int"),
    (("metadata", "ownerReferences", 0, "kind"), "", "metadata.ownerReferences[0].kind: '' is not a kind"),
    (("spec", "priorityClassName"), 2, "spec.priorityClassName: expected a string, got int"),
])
def test_bad_annotations_and_owners_reject_the_pod_naming_the_field(path: tuple[object, ...], value: object,
                                                                   needle: str) -> None:
    doc = _doc()
    pod = next(p for p in doc["items"] if p["metadata"]["name"] == "fluent-bit-h2k9z")  # type: ignore[attr-defined,index]
    target = pod
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    pods, rejected = parse_pod_list(doc, Layout("cgroupfs"))
    assert len(rejected) == 1 and needle in rejected[0], rejected
    assert "logging/fluent-bit-h2k9z" in rejected[0]
    assert {p.info.name for p in pods} == (PROTECTED | BATCH | HP) - {"fluent-bit-h2k9z"}


def test_no_annotations_no_owners_parse() -> None:
    doc = _doc()
    pod = copy.deepcopy(next(p for p in doc["items"] if p["metadata"]["name"] == "etl-28571300-x9k2m"))  # type: ignore[attr-defined,index]
    del pod["metadata"]["annotations"], pod["metadata"]["ownerReferences"]
    doc = {"kind": "PodList", "apiVersion": "v1", "items": [pod]}
    (parsed,), rejected = parse_pod_list(doc, Layout("cgroupfs"))
    assert rejected == [] and parsed.workload.be and not parsed.workload.protected


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def test_the_config_file_reaches_the_kubelet_source(tmp_path: Path) -> None:
    """`protection:` in the YAML file → AgentConfig → make_sources → the kubelet source's classification."""
    with FakeKubelet(PODLIST) as kubelet:
        cfg = load_config(_write(tmp_path, {
            "sources": {"kubelet": {"url": kubelet.url, "token_file": ""}},
            "protection": {"namespaces": ["logging"], "daemonsets": False, "priority_threshold": 2000001000},
        }))
        assert cfg.protection == ProtectionConfig(2000001000, ("logging",), False)
        sources = make_sources(cfg, Layout("cgroupfs"), None, None)  # type: ignore[arg-type]
        assert sources.kubelet is not None
        await sources.kubelet.refresh()
    result = sources.kubelet.workloads()
    protected = {w.name for w in result.workloads if w.protected}
    assert protected == {"kube-proxy-7xk2p", "calico-node-q8m4d", "fluent-bit-h2k9z", "node-exporter-node-a",
                         "trainer-opted-out-0"}
    assert {w.name for w in result.workloads if w.be} == BATCH | {"kube-state-metrics-6b9f7c-m4d2x"}


def test_config_defaults_and_errors(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, {})).protection == ProtectionConfig()
    for section, field in (({"priority_threshold": 0}, "protection.priority_threshold"),
                           ({"priority_threshold": "high"}, "protection.priority_threshold"),
                           ({"namespaces": ["Bad_NS"]}, "protection.namespaces[0]"),
                           ({"namespaces": "kube-system"}, "protection.namespaces"),
                           ({"daemonsets": "no"}, "protection.daemonsets"),
                           ({"static_pods": False}, "protection.static_pods")):
        with pytest.raises(ConfigError) as err:
            load_config(_write(tmp_path, {"protection": section}))
        assert f": {field}:" in str(err.value), str(err.value)
