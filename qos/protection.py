"""Which pods the node needs whatever their QoS class: never BE, never a victim.

kube-proxy, CNI agents and log shippers often run as BestEffort; the kubelet's own eviction manager never
evicts critical pods, and neither does the agent. A pod is protected when ANY of these holds: its priority
is at or above `priority_threshold` (`system-cluster-critical` is 2000000000, `system-node-critical`
2000001000); its `priorityClassName` starts with `system-` (a prefix Kubernetes reserves); it is a static
or mirror pod; its namespace is listed; it carries the opt-out annotation; or, when `daemonsets` is on, a
DaemonSet owns it. A `koordinator.sh/qosClass: BE` label does not override any of this.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from qos import validation

OPT_OUT_ANNOTATION = "coloc-agent.io/protected"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SOURCE_ANNOTATION = "kubernetes.io/config.source"
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
SYSTEM_CLUSTER_CRITICAL = 2_000_000_000
INT32_MAX = 2**31 - 1
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class ProtectionConfig:
    """The `protection:` section. `namespaces` are protected whole; `daemonsets` protects DaemonSet pods."""

    # pods of this priority or above are protected (2000000000: system-cluster-critical)
    priority_threshold: int = validation.bounded(SYSTEM_CLUSTER_CRITICAL, 1, INT32_MAX)
    namespaces: tuple[str, ...] = ("kube-system",)
    daemonsets: bool = True

    def __post_init__(self) -> None:
        validation.check_bounds(self, "protection")
        validation.integer("protection.priority_threshold", self.priority_threshold)
        if not isinstance(self.namespaces, tuple | list):
            raise ValueError(f"protection.namespaces: expected a list, got {self.namespaces!r}")
        for i, ns in enumerate(self.namespaces):
            if not isinstance(ns, str) or not _DNS_LABEL.fullmatch(ns):
                raise ValueError(f"protection.namespaces[{i}]: {ns!r} is not a namespace (a DNS-1123 label)")
        if len(set(self.namespaces)) != len(self.namespaces):
            raise ValueError(f"protection.namespaces: listed twice: {sorted(self.namespaces)}")
        validation.check_choices(self, "protection")


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the rule reads of a pod. `owner_kinds`: the `kind` of each ownerReference."""

    namespace: str
    priority: int = 0
    priority_class: str = ""
    annotations: Mapping[str, str] | None = None
    owner_kinds: tuple[str, ...] = ()


def protection_reason(pod: PodFacts, cfg: ProtectionConfig) -> str | None:
    """Why the pod is protected (the first criterion that holds, as a short reason), or None."""
    annotations = pod.annotations or {}
    if pod.priority >= cfg.priority_threshold:
        return f"priority {pod.priority} >= {cfg.priority_threshold}"
    if pod.priority_class.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        return f"priorityClassName {pod.priority_class}"
    if MIRROR_ANNOTATION in annotations:
        return "mirror pod"
    source = annotations.get(SOURCE_ANNOTATION)
    if source is not None and source != "api":
        return f"static pod (config.source {source})"
    if pod.namespace in cfg.namespaces:
        return f"namespace {pod.namespace}"
    if annotations.get(OPT_OUT_ANNOTATION) == "true":
        return f"annotation {OPT_OUT_ANNOTATION}"
    if cfg.daemonsets and "DaemonSet" in pod.owner_kinds:
        return "DaemonSet pod"
    return None


class ConflictNotes:
    """Remembers which protected pods also carry a BE label, so each misconfiguration is reported once.

    Bounded: past `limit` pods it starts afresh (a pod may then be reported again, never missed)."""

    def __init__(self, limit: int = 4096) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def first_time(self, uid: str) -> bool:
        """True the first time `uid` is noted, False after."""
        if uid in self._seen:
            return False
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen.add(uid)
        return True
