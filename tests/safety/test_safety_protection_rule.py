"""The protection rule on its own: each criterion, the threshold boundary, the settings, the once-per-pod
note of a pod that is both protected and labelled BE."""

from __future__ import annotations

import pytest

from qos.protection import (
    OPT_OUT_ANNOTATION,
    ConflictNotes,
    PodFacts,
    ProtectionConfig,
    protection_reason,
)

DEFAULT = ProtectionConfig()


def reason(cfg: ProtectionConfig = DEFAULT, **kw: object) -> str | None:
    facts = PodFacts(**{"namespace": "batch", **kw})  # type: ignore[arg-type]
    return protection_reason(facts, cfg)


def test_a_plain_batch_pod_is_not_protected() -> None:
    assert reason(priority=5500, priority_class="koord-batch",
                  annotations={"kubernetes.io/config.source": "api"}, owner_kinds=("Job",)) is None


@pytest.mark.parametrize(("priority", "protected"), [
    (1_999_999_999, False),  # one below system-cluster-critical
    (2_000_000_000, True),  # system-cluster-critical: the default threshold itself
    (2_000_001_000, True),  # system-node-critical (kube-proxy, CNI agents)
    (1_000_000_000, False),  # the highest user-definable priority
    (-5, False),
])
def test_priority_threshold_boundary(priority: int, protected: bool) -> None:
    got = reason(priority=priority)
    assert (got is not None) is protected
    if protected:
        assert got == f"priority {priority} >= 2000000000"


def test_a_configured_threshold_moves_the_boundary() -> None:
    cfg = ProtectionConfig(priority_threshold=9000)
    assert reason(cfg, priority=9000) == "priority 9000 >= 9000"
    assert reason(cfg, priority=8999) is None


def test_system_priority_class_whatever_the_priority() -> None:
    # The class name alone protects, e.g. before admission filled in spec.priority.
    assert reason(priority_class="system-node-critical") == "priorityClassName system-node-critical"
    assert reason(priority_class="system-cluster-critical") == "priorityClassName system-cluster-critical"
    assert reason(priority_class="systemic-batch") is None
    assert reason(priority_class="my-system-critical") is None


def test_static_and_mirror_pods() -> None:
    assert reason(annotations={"kubernetes.io/config.mirror": "3e5a9c0d"}) == "mirror pod"
    assert reason(annotations={"kubernetes.io/config.source": "file"}) == "static pod (config.source file)"
    assert reason(annotations={"kubernetes.io/config.source": "http"}) == "static pod (config.source http)"
    assert reason(annotations={"kubernetes.io/config.source": "api"}) is None
    assert reason(annotations={}) is None


def test_protected_namespaces_default_and_configured() -> None:
    assert reason(namespace="kube-system") == "namespace kube-system"
    assert reason(namespace="kube-public") is None
    cfg = ProtectionConfig(namespaces=("monitoring", "logging"))
    assert reason(cfg, namespace="logging") == "namespace logging"
    assert reason(cfg, namespace="kube-system") is None, "the list replaces the default"
    assert reason(ProtectionConfig(namespaces=()), namespace="kube-system") is None


def test_opt_out_annotation_only_when_true() -> None:
    assert reason(annotations={OPT_OUT_ANNOTATION: "true"}) == f"annotation {OPT_OUT_ANNOTATION}"
    for value in ("false", "", "yes", "TRUE"):
        assert reason(annotations={OPT_OUT_ANNOTATION: value}) is None, value


def test_daemonset_pods_unless_switched_off() -> None:
    assert reason(owner_kinds=("DaemonSet",)) == "DaemonSet pod"
    assert reason(owner_kinds=("ReplicaSet", "DaemonSet")) == "DaemonSet pod"
    assert reason(owner_kinds=("ReplicaSet",)) is None
    assert reason(ProtectionConfig(daemonsets=False), owner_kinds=("DaemonSet",)) is None
    # Switching DaemonSets off leaves the other criteria alone.
    cfg = ProtectionConfig(daemonsets=False)
    assert reason(cfg, owner_kinds=("DaemonSet",), priority=2_000_001_000) is not None


def test_first_criterion_names_the_reason() -> None:
    kube_proxy = PodFacts(namespace="kube-system", priority=2_000_001_000,
                          priority_class="system-node-critical", owner_kinds=("DaemonSet",))
    assert protection_reason(kube_proxy, DEFAULT) == "priority 2000001000 >= 2000000000"


@pytest.mark.parametrize(("kw", "field"), [
    ({"priority_threshold": 0}, "protection.priority_threshold"),
    ({"priority_threshold": 2**31}, "protection.priority_threshold"),
    ({"priority_threshold": True}, "protection.priority_threshold"),
    ({"namespaces": ("Kube-System",)}, "protection.namespaces[0]"),
    ({"namespaces": ("kube-system", "")}, "protection.namespaces[1]"),
    ({"namespaces": ("a", "a")}, "protection.namespaces"),
    ({"namespaces": "kube-system"}, "protection.namespaces"),
    ({"daemonsets": "yes"}, "protection.daemonsets"),
])
def test_bad_settings_name_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=r"^" + field.replace("[", r"\[").replace("]", r"\]") + ":"):
        ProtectionConfig(**kw)  # type: ignore[arg-type]


def test_conflict_notes_once_per_uid_and_bounded() -> None:
    notes = ConflictNotes(limit=2)
    assert notes.first_time("a") and not notes.first_time("a")
    assert notes.first_time("b") and not notes.first_time("b")
    assert notes.first_time("c"), "past the bound it starts afresh"
    assert not notes.first_time("c")
