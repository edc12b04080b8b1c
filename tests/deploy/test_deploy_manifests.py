"""deploy/: every Kubernetes object validates against the official schemas (kubernetes-validate, strict,
offline), and the pieces agree with each other and with the agent (ports, labels, config, RBAC)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import AgentConfig
from agent.configload import from_mapping
from agent.metrics import MetricsConfig

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S_VERSION = "1.30.0"


def objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def by_kind(kind: str) -> dict[str, Any]:
    found = [o for o in objects(DEPLOY / "daemonset.yaml") if o["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def agent_container() -> dict[str, Any]:
    containers = by_kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_core_objects_are_valid_kubernetes_objects() -> None:
    kinds = []
    for obj in objects(DEPLOY / "daemonset.yaml"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        kinds.append(obj["kind"])
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    ]


@pytest.mark.parametrize(
    "breakage",
    ["unknown field", "wrong type"],
)
def test_the_validator_catches_a_broken_daemonset(breakage: str) -> None:
    ds = copy.deepcopy(by_kind("DaemonSet"))
    spec = ds["spec"]["template"]["spec"]
    if breakage == "unknown field":
        spec["hostPid"] = spec.pop("hostPID")
    else:
        spec["containers"][0]["ports"][0]["containerPort"] = "9316"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def test_daemonset_has_host_access_mounts_probes_and_resources() -> None:
    ds = by_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert (
        ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    c = agent_container()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    assert mounts["/sys/fs/cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    assert mounts["/var/run/coloc-agent"]["hostPath"]["path"] == "/var/run/coloc-agent"
    assert mounts["/etc/coloc-agent"]["configMap"]["name"] == by_kind("ConfigMap")["metadata"]["name"]
    sc = c["securityContext"]
    assert sc.get("privileged") or {"SYS_ADMIN", "NET_ADMIN", "KILL"} <= set(sc["capabilities"]["add"])
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert "cpu" not in c["resources"]["limits"]
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
    config = yaml.safe_load(by_kind("ConfigMap")["data"]["config.yaml"])
    assert port == config["metrics"]["port"] == MetricsConfig().port
    assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == (
        "/healthz",
        "metrics",
    )
    assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == (
        "/readyz",
        "metrics",
    )
    assert c["command"][-1] == "/etc/coloc-agent/config.yaml"
    assert pod["serviceAccountName"] == by_kind("ServiceAccount")["metadata"]["name"]


def test_rbac_grants_what_the_agent_needs_to_its_service_account() -> None:
    role, binding, sa = by_kind("ClusterRole"), by_kind("ClusterRoleBinding"), by_kind("ServiceAccount")
    grants = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    needed = {
        ("pods", "get"),
        ("pods", "list"),
        ("pods/eviction", "create"),
        ("events", "create"),
        ("nodes", "get"),
        ("nodes", "patch"),
    }
    assert needed <= grants
    assert not any(verb in {"*", "delete", "deletecollection"} for _, verb in grants)
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]


def test_configmap_holds_a_config_the_agent_accepts() -> None:
    data = yaml.safe_load(by_kind("ConfigMap")["data"]["config.yaml"])
    metrics = from_mapping(MetricsConfig, data["metrics"])
    assert (metrics.bind, metrics.port) == ("0.0.0.0", 9316)
    if "metrics" not in AgentConfig.__dataclass_fields__:
        data.pop("metrics")  # not wired into AgentConfig yet; validated on its own above
    config = from_mapping(AgentConfig, data)
    assert config.cgroups.mount == "/sys/fs/cgroup"


def test_podmonitor_scrapes_the_daemonset_pods_as_job_coloc_agent() -> None:
    (pm,) = objects(DEPLOY / "prometheus" / "podmonitor.yaml")
    assert (pm["apiVersion"], pm["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    ds = by_kind("DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert ds["metadata"]["namespace"] in pm["spec"]["namespaceSelector"]["matchNames"]
    # jobLabel names a pod label whose value becomes the job the alert rules select on
    assert labels[pm["spec"]["jobLabel"]] == "coloc-agent"
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in agent_container()["ports"]}
    assert endpoint["path"] == "/metrics"
