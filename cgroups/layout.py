"""Kubelet and YARN cgroup path layout for the cgroupfs and systemd drivers.

Every path returned here is RELATIVE TO THE AGENT'S CGROUP ROOT, and that root IS the kubepods
directory (`kubepods` for cgroupfs, `kubepods.slice` for systemd; `Layout.kubepods_dir` names it).
Guaranteed pods sit directly in the root, so `tier("guaranteed") == ""`:

    cgroupfs: besteffort/pod<uid>/<cid>
    systemd:  kubepods-besteffort.slice/kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<cid>.scope
    YARN:     <besteffort tier>/<yarn_hierarchy>/container_<...>

Ids are validated with strict patterns before they become a path component; anything else raises
ValueError naming the field and the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from cgroups.discovery import DRIVERS, Driver

TIERS = ("guaranteed", "burstable", "besteffort")

_POD_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")
_HEX_ID = re.compile(r"[0-9a-f]{12,64}")
_YARN_CONTAINER = re.compile(r"container_(e\d+_)?\d+_\d{4,}_\d{2,}_\d{6,}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

# runtime scheme -> (systemd scope prefix, cgroupfs prefix)
RUNTIMES: dict[str, tuple[str, str]] = {
    "containerd": ("cri-containerd-", ""),
    "cri-o": ("crio-", "crio-"),  # CRI-O names its cgroupfs leaf crio-<id> too
    "docker": ("docker-", ""),
}


class _HasValue(Protocol):
    @property
    def value(self) -> str: ...


TierLike = str | _HasValue


def tier_name(tier: TierLike) -> str:
    """Normalise a tier given as "besteffort", "BestEffort" or an enum whose value is the name."""
    raw = tier if isinstance(tier, str) else tier.value
    name = raw.lower().replace("-", "").replace("_", "")
    if name not in TIERS:
        raise ValueError(f"QoS tier must be one of {TIERS}, got {raw!r}")
    return name


def check_pod_uid(uid: str) -> str:
    if not isinstance(uid, str) or not _POD_UID.fullmatch(uid):
        raise ValueError(f"pod uid must be a lowercase UUID, got {uid!r}")
    return uid


def parse_container_id(container_id: str) -> tuple[str, str]:
    """Split a runtime container id `containerd://<hex>` into (runtime, hex id), validating both."""
    if not isinstance(container_id, str) or "://" not in container_id:
        raise ValueError(
            "container id must look like containerd://<hex>, cri-o://<hex> or docker://<hex>, "
            f"got {container_id!r}"
        )
    runtime, _, cid = container_id.partition("://")
    if runtime not in RUNTIMES:
        raise ValueError(f"container runtime must be one of {sorted(RUNTIMES)}, got {runtime!r}")
    if not _HEX_ID.fullmatch(cid):
        raise ValueError(f"container id must be 12-64 lowercase hex digits, got {cid!r}")
    return runtime, cid


def check_yarn_container(container_id: str) -> str:
    if not isinstance(container_id, str) or not _YARN_CONTAINER.fullmatch(container_id):
        raise ValueError(
            "YARN container id must match container_[e<epoch>_]<clusterTs>_<app>_<attempt>_<seq>, "
            f"got {container_id!r}"
        )
    return container_id


def _check_name(value: str, what: str, allow_slash: bool = False) -> str:
    parts = value.split("/") if allow_slash else [value]
    if not value or not all(_NAME.fullmatch(p) and p not in (".", "..") for p in parts):
        raise ValueError(f"{what} must be plain name(s) of [A-Za-z0-9_.-], got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Identity:
    """What a cgroup path means in the kubelet / YARN layout."""

    kind: str  # root | tier | pod | container | yarn_root | yarn | other
    tier: str  # guaranteed | burstable | besteffort
    pod_uid: str | None = None
    container_id: str | None = None
    yarn_container: str | None = None


class Layout:
    """Builds and recognises cgroup paths relative to the kubepods root."""

    def __init__(self, driver: str, kubepods: str = "kubepods", yarn_hierarchy: str = "hadoop-yarn") -> None:
        if driver not in DRIVERS:
            raise ValueError(f"cgroup driver must be one of {DRIVERS}, got {driver!r}")
        self.driver: Driver = "systemd" if driver == "systemd" else "cgroupfs"
        self.kubepods = _check_name(kubepods, "kubepods name")
        self.yarn_hierarchy = _check_name(yarn_hierarchy, "YARN cgroup hierarchy", allow_slash=True)

    @property
    def kubepods_dir(self) -> str:
        """The agent root on a real node: `kubepods` or `kubepods.slice`."""
        return f"{self.kubepods}.slice" if self.driver == "systemd" else self.kubepods

    def tier(self, tier: TierLike) -> str:
        name = tier_name(tier)
        if name == "guaranteed":
            return ""
        return f"{self.kubepods}-{name}.slice" if self.driver == "systemd" else name

    def pod(self, uid: str, qos: TierLike) -> str:
        name = tier_name(qos)
        uid = check_pod_uid(uid)
        if self.driver == "systemd":
            infix = "" if name == "guaranteed" else f"-{name}"
            leaf = f"{self.kubepods}{infix}-pod{uid.replace('-', '_')}.slice"
        else:
            leaf = f"pod{uid}"
        parent = self.tier(name)
        return f"{parent}/{leaf}" if parent else leaf

    def container(self, uid: str, qos: TierLike, container_id: str) -> str:
        runtime, cid = parse_container_id(container_id)
        systemd_prefix, cgroupfs_prefix = RUNTIMES[runtime]
        leaf = f"{systemd_prefix}{cid}.scope" if self.driver == "systemd" else f"{cgroupfs_prefix}{cid}"
        return f"{self.pod(uid, qos)}/{leaf}"

    def yarn_root(self) -> str:
        return f"{self.tier('besteffort')}/{self.yarn_hierarchy}"

    def yarn_container(self, container_id: str) -> str:
        return f"{self.yarn_root()}/{check_yarn_container(container_id)}"

    def identify(self, rel: str) -> Identity:
        """Classify a path relative to the root (the inverse of the builders; unknown shapes are "other")."""
        parts = [p for p in rel.split("/") if p]
        if not parts:
            return Identity("root", "guaranteed")
        be, bu = self.tier("besteffort"), self.tier("burstable")
        tier = {be: "besteffort", bu: "burstable"}.get(parts[0])
        rest = parts[1:] if tier else parts
        tier = tier or "guaranteed"
        if not rest:
            return Identity("tier" if tier != "guaranteed" else "other", tier)
        yarn = self.yarn_hierarchy.split("/")
        if tier == "besteffort" and rest[: len(yarn)] == yarn:
            tail = rest[len(yarn) :]
            if not tail:
                return Identity("yarn_root", tier)
            if _YARN_CONTAINER.fullmatch(tail[0]):
                return Identity("yarn", tier, yarn_container=tail[0])
            return Identity("other", tier)
        uid = self._pod_uid(rest[0], tier)
        if uid is None:
            return Identity("other", tier)
        if len(rest) == 1:
            return Identity("pod", tier, pod_uid=uid)
        cid = self._container_hex(rest[1])
        return Identity("container" if cid else "other", tier, pod_uid=uid, container_id=cid)

    def _pod_uid(self, leaf: str, tier: str) -> str | None:
        if self.driver == "systemd":
            infix = "" if tier == "guaranteed" else f"-{tier}"
            prefix, suffix = f"{self.kubepods}{infix}-pod", ".slice"
            if not (leaf.startswith(prefix) and leaf.endswith(suffix)):
                return None
            uid = leaf[len(prefix) : -len(suffix)].replace("_", "-")
        else:
            if not leaf.startswith("pod"):
                return None
            uid = leaf[3:]
        return uid if _POD_UID.fullmatch(uid) else None

    def _container_hex(self, leaf: str) -> str | None:
        if self.driver == "systemd":
            for prefix, _ in RUNTIMES.values():
                if leaf.startswith(prefix) and leaf.endswith(".scope"):
                    cid = leaf[len(prefix) : -len(".scope")]
                    return cid if _HEX_ID.fullmatch(cid) else None
            return None
        cid = leaf.removeprefix("crio-")
        return cid if _HEX_ID.fullmatch(cid) else None
