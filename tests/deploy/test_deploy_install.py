"""`kubectl apply -k deploy/overlays/<each>` works on a cluster without the Prometheus Operator.

Two checks. (1) Every rendered overlay holds only built-in kinds: each object's API group is on the allow-list
below and its kind is a resource that group serves in the Kubernetes release the schemas are vendored from;
a kind that needs a third-party CRD (PodMonitor, PrometheusRule) fails it. (2) kubectl itself applies each
overlay in a server-side dry run against an API server that knows the built-in kinds only
(tests/deploy/builtin_apiserver.py: no kube-apiserver can be installed here, so a local fake serves the
discovery, OpenAPI and server-side-apply calls kubectl makes, with the release's schemas). The monitoring
components, added, make that same apply fail as a real cluster without the CRDs does.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from builtin_apiserver import RELEASE, BuiltinApiServer, builtin_groups, builtin_resources, client_release
from deploy_render import (
    COMPONENTS,
    DEPLOY,
    OVERLAYS,
    needs_kubectl,
    rendered,
    rendered_with,
    with_components_kustomization,
)
from kit.agentproc import kubeconfig

pytestmark = needs_kubectl

# The API groups a manifest of this project may use: Kubernetes' own. Anything else needs a CRD installed
# first (monitoring.coreos.com: the Prometheus Operator), so it belongs in a component under deploy/.
BUILTIN_GROUPS = {"", "apps", "rbac.authorization.k8s.io", "policy", "scheduling.k8s.io", "networking.k8s.io",
                  "batch", "coordination.k8s.io", "node.k8s.io", "storage.k8s.io", "autoscaling"}


def third_party(objects: list[dict[str, object]]) -> list[str]:
    """`apiVersion kind` of every object that is not a built-in resource."""
    served = {(f"{r.group}/{r.version}" if r.group else r.version, r.kind) for r in builtin_resources()}
    out = []
    for obj in objects:
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        group = api_version.rpartition("/")[0]
        if group not in BUILTIN_GROUPS or (api_version, kind) not in served:
            out.append(f"{api_version} {kind}")
    return out


def test_the_allow_list_and_the_fake_server_are_of_one_kubernetes_release() -> None:
    assert client_release() == RELEASE.rsplit(".", 1)[0], "the kubernetes client and the schemas must agree"
    assert builtin_groups() >= BUILTIN_GROUPS
    kinds = {r.kind for r in builtin_resources()}
    assert {"Namespace", "DaemonSet", "ClusterRole", "ConfigMap", "Pod", "CustomResourceDefinition"} <= kinds
    assert not {"PodMonitor", "PrometheusRule", "ServiceMonitor"} & kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_only_built_in_kinds(overlay: str) -> None:
    assert third_party(rendered(overlay)) == []


def test_the_check_fails_on_the_prometheus_operator_component() -> None:
    assert third_party(rendered_with("standalone", *COMPONENTS)) == [
        "monitoring.coreos.com/v1 PodMonitor", "monitoring.coreos.com/v1 PrometheusRule"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[BuiltinApiServer, dict[str, str]]]:
    """The fake API server and the environment kubectl reaches it with."""
    with BuiltinApiServer() as server:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", server.url))}
        yield server, env


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], env=env, input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)


def create_namespace(env: dict[str, str], overlay: str) -> None:
    """The Namespace, applied for real first: a dry run stores nothing, so the namespaced objects of the same
    dry run would meet "namespaces not found" (the NamespaceLifecycle admission plugin, as on a real
    cluster)."""
    (ns,) = [o for o in rendered(overlay) if o["kind"] == "Namespace"]
    proc = kubectl(env, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(ns))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_applies_in_a_server_side_dry_run_without_the_operator_crds(
        overlay: str, cluster: tuple[BuiltinApiServer, dict[str, str]]) -> None:
    server, env = cluster
    create_namespace(env, overlay)
    proc = kubectl(env, "apply", "--server-side", "--dry-run=server", "-k",
                   str(DEPLOY / "overlays" / overlay))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(rendered(overlay)), lines
    assert all(ln.endswith("(server dry run)") for ln in lines), lines
    dry = sorted(kind for kind, _, is_dry in server.applied if is_dry)
    assert dry == sorted(o["kind"] for o in rendered(overlay))
    # kubectl left validation to the server, strictly
    patches = server.seen("PATCH")
    assert patches and all("fieldValidation=Strict" in r.path and "dryRun=All" in r.path for r in patches[1:])
    assert list(server.stored) == [("v1", "namespaces", "", "coloc-system")], "a dry run stores nothing"


def test_without_the_namespace_the_dry_run_fails_as_on_a_real_cluster(
        cluster: tuple[BuiltinApiServer, dict[str, str]]) -> None:
    _, env = cluster
    proc = kubectl(env, "apply", "--server-side", "--dry-run=server", "-k",
                   str(DEPLOY / "overlays" / "standalone"))
    assert proc.returncode != 0 and 'namespaces "coloc-system" not found' in proc.stderr


def test_the_monitoring_components_fail_on_a_cluster_without_the_operator_crds(
        cluster: tuple[BuiltinApiServer, dict[str, str]], tmp_path: Path) -> None:
    server, env = cluster
    create_namespace(env, "koordinator")
    root = with_components_kustomization(tmp_path / "site", "koordinator", COMPONENTS)
    proc = kubectl(env, "apply", "--server-side", "--dry-run=server", "-k", str(root))
    assert proc.returncode != 0
    assert 'no matches for kind "PodMonitor" in version "monitoring.coreos.com/v1"' in proc.stderr
    assert 'no matches for kind "PrometheusRule" in version "monitoring.coreos.com/v1"' in proc.stderr
    assert "ensure CRDs are installed first" in proc.stderr
    # the built-in objects, the dashboard's ConfigMap among them, still went through
    assert ("ConfigMap", "coloc-agent-dashboard", True) in server.applied


@pytest.mark.parametrize("breakage", ["unknown field", "wrong type"])
def test_the_server_refuses_a_broken_daemonset(breakage: str,
                                               cluster: tuple[BuiltinApiServer, dict[str, str]]) -> None:
    _, env = cluster
    create_namespace(env, "standalone")
    (ds,) = [copy.deepcopy(o) for o in rendered("standalone") if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    if breakage == "unknown field":
        spec["hostPid"] = spec.pop("hostPID")
    else:
        spec["containers"][0]["ports"][0]["containerPort"] = "19316"
    proc = kubectl(env, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(ds))
    assert proc.returncode != 0 and 'DaemonSet "coloc-agent" is invalid' in proc.stderr, proc.stderr
