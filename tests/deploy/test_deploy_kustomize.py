"""deploy/: every overlay renders with `kubectl kustomize`, its objects validate against the official schemas
(kubernetes-validate, strict, offline) for the oldest and newest Kubernetes it knows, and the pieces agree
with each other and with the agent (ports, volumes, config, probes, labels)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_render import (
    KOORDLET_PORT,
    OVERLAYS,
    agent_container,
    config_text,
    needs_kubectl,
    one,
    rendered,
    rendered_with,
)

from agent.config.agent import load_config

kv = pytest.importorskip("kubernetes_validate")
from kubernetes_validate import utils as kv_utils  # noqa: E402

pytestmark = needs_kubectl
VERSIONS = sorted(set(kv_utils.all_versions()), key=lambda v: tuple(int(x) for x in v.split(".")))
OLDEST, NEWEST = VERSIONS[0], VERSIONS[-1]


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly(overlay: str, version: str) -> None:
    kinds = []
    for obj in rendered(overlay):
        kinds.append(obj["kind"])
        kv.validate(obj, version, strict=True)
    # the monitoring objects are components one adds (deploy/prometheus, deploy/grafana; test_deploy_install)
    assert sorted(kinds) == sorted(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                    "ConfigMap", "DaemonSet"])


@pytest.mark.parametrize("breakage", ["unknown field", "wrong type"])
def test_the_validator_catches_a_broken_daemonset(breakage: str) -> None:
    ds = copy.deepcopy(one("standalone", "DaemonSet"))
    spec = ds["spec"]["template"]["spec"]
    if breakage == "unknown field":
        spec["hostPid"] = spec.pop("hostPID")
    else:
        spec["containers"][0]["ports"][0]["containerPort"] = "19316"
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, NEWEST, strict=True)


@pytest.fixture(autouse=True)
def _host_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the downward API gives the pod (`metrics.bind: env:HOST_IP`)."""
    monkeypatch.setenv("HOST_IP", "10.0.0.7")

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_config_loads_with_the_agents_own_loader(overlay: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_text(overlay))
    cfg = load_config(path)
    c = agent_container(overlay)
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == cfg.metrics.port
    # hostNetwork: Prometheus scrapes the node IP, and only the node IP is bound (downward API status.hostIP)
    assert cfg.metrics.bind == "env:HOST_IP"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env["HOST_IP"] == "status.hostIP"
    assert cfg.cgroups.root == "kubepods" and not cfg.cgroups.setup_tiers
    if overlay == "standalone":
        assert not (cfg.sources.kubelet.enabled or cfg.sources.kube_api.enabled)
        assert cfg.batch.origin == "local" and cfg.sources.reporting.mode == "off"
    else:
        assert cfg.sources.kubelet.enabled and cfg.sources.kube_api.enabled and cfg.sources.yarn.enabled
        assert cfg.batch.origin == "annotation" and cfg.sources.reporting.mode == "annotation"
    if overlay == "replace-koordlet":
        assert cfg.metrics.port == KOORDLET_PORT
    else:
        assert cfg.metrics.port != KOORDLET_PORT


# What each overlay's name promises about koordlet's two Koordinator objects: in koordlet's place, the agent
# writes the NodeMetric (without it koord-manager zeroes the batch resources, and every admission is refused)
# and reads the NodeSLO; beside koordlet ("koordinator"), koordlet does both and the agent does neither (two
# writers of one NodeMetric would undo each other); standalone has no API server at all.
KOORDLET_DUTIES = {"replace-koordlet": True, "koordinator": False, "standalone": False}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_reports_nodemetric_and_reads_nodeslo_as_its_name_promises(overlay: str,
                                                                                  tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_text(overlay))
    cfg = load_config(path)
    duties = KOORDLET_DUTIES[overlay]
    assert cfg.sources.nodemetric.enabled is duties, f"{overlay}: sources.nodemetric.enabled"
    assert cfg.sources.nodeslo.enabled is duties, f"{overlay}: sources.nodeslo.enabled"
    if duties:  # the API calls they make are granted (test_deploy_rbac.py checks every rule against the code)
        resources = {r for rule in one(overlay, "ClusterRole")["rules"] for r in rule["resources"]}
        assert {"nodemetrics", "nodemetrics/status", "nodeslos"} <= resources


def test_replace_koordlet_differs_from_koordinator_in_the_port_and_koordlets_duties_only() -> None:
    beside = yaml.safe_load(config_text("koordinator"))
    instead = yaml.safe_load(config_text("replace-koordlet"))
    assert beside["metrics"].pop("port") != instead["metrics"].pop("port")
    assert "nodemetric" not in beside["sources"] and "nodeslo" not in beside["sources"]
    assert instead["sources"].pop("nodemetric") == {"enabled": True}
    assert instead["sources"].pop("nodeslo") == {"enabled": True}
    # koordlet's batchresource hook and yarn-copilot's memory cgroups are theirs beside koordlet; the agent's
    # batch limits (on by default) do them where koordlet is gone.
    assert beside.pop("batch_limits") == {"enabled": False, "yarn": False}
    assert "batch_limits" not in instead
    assert beside == instead


def mounts(overlay: str) -> dict[str, dict[str, Any]]:
    pod = one(overlay, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: {**volumes[m["name"]], "readOnly": m.get("readOnly", False)}
            for m in agent_container(overlay)["volumeMounts"]}


def under_writable_volume(overlay: str, path: str) -> dict[str, Any] | None:
    for mount_path, vol in mounts(overlay).items():
        if (path == mount_path or path.startswith(mount_path.rstrip("/") + "/")) and not vol["readOnly"]:
            return vol
    return None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_path_the_agent_writes_is_on_a_host_volume(overlay: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_text(overlay))
    cfg = load_config(path)
    c = agent_container(overlay)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    state = under_writable_volume(overlay, str(Path(cfg.state.path).parent))
    sock = under_writable_volume(overlay, str(Path(cfg.api.socket_path).parent))
    cgroup = under_writable_volume(overlay, cfg.cgroups.mount)
    assert state and state["hostPath"]["type"] == "DirectoryOrCreate", "state dir must survive restarts"
    assert sock and sock["hostPath"]["type"] == "DirectoryOrCreate"
    assert cgroup and cgroup["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}
    config_mount = mounts(overlay)["/etc/coloc-agent"]
    assert config_mount["readOnly"] and config_mount["configMap"]["name"] == one(overlay, "ConfigMap")[
        "metadata"]["name"]
    assert c["command"] + c["args"] == ["coloc-agent", "run", "--config", "/etc/coloc-agent/config.yaml"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_security_probes_resources_and_rollout(overlay: str, tmp_path: Path) -> None:
    ds = one(overlay, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = agent_container(overlay)
    sc = c["securityContext"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["KILL"]}
    assert pod["hostPID"] is True
    assert "/" in c["image"].split(":")[0] and c["image"].startswith("ghcr.io/"), "image must be qualified"
    assert (c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]) == (
        "/healthz", "/readyz")
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert "cpu" not in c["resources"]["limits"]
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    assert isinstance(rolling, str) and rolling.endswith("%") and 0 < int(rolling[:-1]) < 100
    path = tmp_path / "config.yaml"
    path.write_text(config_text(overlay))
    cfg = load_config(path)
    # run.py drains evictions for grace_period_s + 2, then stops the API (2 s) and flushes the ledger
    assert pod["terminationGracePeriodSeconds"] >= cfg.eviction.grace_period_s + 2 + 2 + 10
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"][
        "labels"].items()
    assert pod["serviceAccountName"] == one(overlay, "ServiceAccount")["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True) is (overlay != "standalone")


def test_namespace_carries_pod_security_labels() -> None:
    labels = one("standalone", "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # hostPID/hostPath need it
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_podmonitor_scrapes_the_daemonset_pods_as_job_coloc_agent(overlay: str) -> None:
    (pm,) = [o for o in rendered_with(overlay, "prometheus") if o["kind"] == "PodMonitor"]
    ds = one(overlay, "DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert ds["metadata"]["namespace"] in pm["spec"]["namespaceSelector"]["matchNames"]
    assert labels[pm["spec"]["jobLabel"]] == "coloc-agent"
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in agent_container(overlay)["ports"]}
    assert endpoint["path"] == "/metrics"
