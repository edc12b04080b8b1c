"""The ClusterRole grants exactly what the agent calls: every Kubernetes client call and kubelet path in
agent/ (found by grep) is covered by a rule, every rule covers at least one call, and every rule is
commented with the code that needs it."""

from __future__ import annotations

import re
from pathlib import Path

from deploy_render import DEPLOY, REPO, needs_kubectl, one

AGENT = REPO / "agent"
API_CLASSES = {"CoreV1Api": ""}  # client class → API group
VERBS = {"read": "get", "get": "get", "list": "list",
         "patch": "patch", "create": "create", "delete": "delete",
         "replace": "update", "watch": "watch"}
# How the kubelet authorizes its own API (kubelet server auth: path prefix → nodes subresource).
KUBELET_SUBRESOURCES = {"/stats": "nodes/stats", "/metrics": "nodes/metrics", "/logs": "nodes/log",
                        "/spec": "nodes/spec"}
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)


def api_grant(cls: str, method: str) -> Grant:
    """CoreV1Api.create_namespaced_pod_eviction → ("", "pods/eviction", "create")."""
    verb, _, rest = method.partition("_")
    rest = rest.removeprefix("namespaced_")
    kind, _, sub = rest.partition("_")
    resource = f"{kind}s" + (f"/{sub}" if sub else "")
    return API_CLASSES[cls], resource, VERBS[verb]


def custom_grant(group: str, plural: str, method: str) -> Grant:
    """CustomObjectsApi.replace_cluster_custom_object_status → (group, "<plural>/status", "update")."""
    verb = VERBS[method.partition("_")[0]]
    return group, plural + ("/status" if method.endswith("_status") else ""), verb


def kubelet_grant(path: str) -> Grant:
    for prefix, res in KUBELET_SUBRESOURCES.items():
        if path.startswith(prefix):
            return "", res, "get"
    return "", "nodes/proxy", "get"


def calls_in_code() -> dict[Grant, set[str]]:
    """Every grant the code needs, with the files that need it."""
    needed: dict[Grant, set[str]] = {}
    for py in AGENT.rglob("*.py"):
        if "coloc/v1" in py.as_posix():
            continue
        text = py.read_text()
        rel = py.relative_to(REPO).as_posix()
        classes = set(re.findall(r"client\.(\w+Api)\(", text))
        if "CustomObjectsApi" in classes:  # group and plural are the module's GROUP, PLURAL constants
            classes.discard("CustomObjectsApi")
            consts = re.search(r'GROUP, VERSION, PLURAL = "([^"]+)", "[^"]+", "([^"]+)"', text)
            assert consts, f"{rel}: CustomObjectsApi without GROUP, VERSION, PLURAL constants"
            methods = re.findall(r"self\._api\.(\w+)\(", text)
            # agent/sources/kubeapi.py get_cluster_object wraps get_cluster_custom_object
            methods += ["get_cluster_custom_object"] * text.count("get_cluster_object(self._api")
            for method in methods:
                needed.setdefault(custom_grant(consts.group(1), consts.group(2), method), set()).add(rel)
        for cls in classes:
            assert cls in API_CLASSES, f"{rel}: {cls}: add its API group to this test and a rule"
            for method in re.findall(r"self\._api\.(\w+)\(", text):
                needed.setdefault(api_grant(cls, method), set()).add(rel)
        if "KubeletSource" in text or py.name == "kubelet.py":
            for path in re.findall(r"_fetcher\.a?get_\w+\(\"(/[^\"]*)\"", text):
                needed.setdefault(kubelet_grant(path), set()).add(rel)
    return needed


def granted() -> set[Grant]:
    role = one("standalone", "ClusterRole")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_the_grep_finds_the_calls_the_agent_is_known_to_make() -> None:
    needed = calls_in_code()
    assert ("", "nodes/proxy", "get") in needed  # agent/sources/kubelet.py GET /pods
    assert ("", "pods/eviction", "create") in needed
    assert ("", "nodes", "patch") in needed
    assert api_grant("CoreV1Api", "read_namespaced_pod_log") == ("", "pods/log", "get")


@needs_kubectl
def test_every_call_is_granted_and_every_grant_is_called() -> None:
    needed, have = calls_in_code(), granted()
    missing = {g: sorted(files) for g, files in needed.items() if g not in have}
    assert not missing, f"calls without a ClusterRole rule: {missing}"
    assert have - set(needed) == set(), "ClusterRole rules no code calls"


@needs_kubectl
def test_every_rule_is_commented_with_the_code_that_needs_it() -> None:
    text = (DEPLOY / "base" / "clusterrole.yaml").read_text()
    blocks = re.split(r"\n  - apiGroups:", text.split("rules:", 1)[1])
    comments = blocks[:-1]  # the comment lines before each rule sit at the end of the previous block
    needed = calls_in_code()
    role = one("standalone", "ClusterRole")
    assert len(comments) == len(role["rules"])
    for comment, rule in zip(comments, role["rules"], strict=True):
        comment_lines = [ln for ln in comment.splitlines() if ln.strip().startswith("#")]
        said = " ".join(comment_lines)
        for res in rule["resources"]:
            for verb in rule["verbs"]:
                files = needed[(rule["apiGroups"][0], res, verb)]
                assert any(f in said for f in files), (res, verb, said)
    assert not Path(AGENT / "sources" / "kubeapi.py").read_text().count("self._api.")
