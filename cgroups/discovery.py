"""Find the cgroup mounts (v1, v2 or hybrid) and the kubelet's cgroup driver."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from cgroups.errors import CgroupError, UnknownFormat
from cgroups.paths import check_rel, join

Mode = Literal["v1", "v2", "hybrid"]
Driver = Literal["cgroupfs", "systemd"]
DRIVERS: tuple[Driver, ...] = ("cgroupfs", "systemd")

# Controllers the kernel can attach to a v1 hierarchy; anything else in the super options is a flag.
V1_CONTROLLERS = frozenset(
    {
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "blkio",
        "perf_event",
        "hugetlb",
        "pids",
        "rdma",
        "misc",
    }
)

_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field_: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field_)


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of /proc/self/mountinfo."""

    mount_id: int
    parent_id: int
    device: str
    root: str
    mount_point: Path
    options: tuple[str, ...]
    fstype: str
    source: str
    super_options: tuple[str, ...]

    @property
    def controllers(self) -> tuple[str, ...]:
        """v1 controllers of a `cgroup` mount (plus `name=...` for named hierarchies); () otherwise."""
        if self.fstype != "cgroup":
            return ()
        return tuple(o for o in self.super_options if o in V1_CONTROLLERS or o.startswith("name="))


def parse_mountinfo(text: str, file: str = "/proc/self/mountinfo") -> list[Mount]:
    """Parse mountinfo text (see proc(5)); a malformed line raises UnknownFormat naming it."""
    mounts: list[Mount] = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            raise UnknownFormat(file, no, line, "no ' - ' separator after the optional fields") from None
        if len(fields) < sep + 4 or len(fields) < 7:
            raise UnknownFormat(file, no, line, "too few fields")
        try:
            mount_id, parent_id = int(fields[0]), int(fields[1])
        except ValueError:
            raise UnknownFormat(file, no, line, "mount ids are not integers") from None
        mounts.append(
            Mount(
                mount_id=mount_id,
                parent_id=parent_id,
                device=fields[2],
                root=_unescape(fields[3]),
                mount_point=Path(_unescape(fields[4])),
                options=tuple(fields[5].split(",")),
                fstype=fields[sep + 1],
                source=_unescape(fields[sep + 2]),
                super_options=tuple(fields[sep + 3].split(",")),
            )
        )
    return mounts


@dataclass(frozen=True)
class Hierarchy:
    """Where each controller lives.

    `v1` maps a v1 controller to its mount point (a combined `cpu,cpuacct` mount appears under both
    names). `unified` is the cgroup2 mount, if any; `unified_controllers` what its root offers.
    """

    mode: Mode
    v1: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))
    unified: Path | None = None
    unified_controllers: frozenset[str] = frozenset()

    @classmethod
    def v2(cls, path: Path) -> Hierarchy:
        """A pure cgroup v2 hierarchy rooted at `path` (a real mount or a tree laid out in a temp dir)."""
        ctrl_file = path / "cgroup.controllers"
        try:
            controllers = frozenset(ctrl_file.read_text().split())
        except FileNotFoundError:
            controllers = frozenset({"cpu", "cpuset", "memory", "pids", "io"})
        return cls(mode="v2", unified=path, unified_controllers=controllers)

    def has(self, ctrl: str) -> bool:
        """True if `ctrl` is on a v1 mount, or on the unified mount of a pure v2 host."""
        return ctrl in self.v1 or (self.mode == "v2" and ctrl in self.unified_controllers)

    def is_v1(self, ctrl: str) -> bool:
        return ctrl in self.v1

    def controller_dir(self, ctrl: str) -> Path:
        """Mount point that holds `ctrl`'s files: its v1 mount, otherwise the unified mount."""
        mount = self.v1.get(ctrl)
        if mount is not None:
            return mount
        if self.unified is not None:
            return self.unified
        raise CgroupError(f"controller {ctrl!r} is not mounted (v1 mounts: {sorted(self.v1)})")

    def mounts(self) -> tuple[Path, ...]:
        """Every distinct mount point (v1 then unified), each once."""
        seen: dict[Path, None] = dict.fromkeys(self.v1.values())
        if self.unified is not None:
            seen[self.unified] = None
        return tuple(seen)


def hierarchy_from_mounts(mounts: list[Mount], base: Path | None = None) -> Hierarchy:
    """Build a Hierarchy from parsed mounts; with `base`, only mounts at or below it count."""
    v1: dict[str, Path] = {}
    unified: Path | None = None
    for m in mounts:
        if base is not None and not (m.mount_point == base or base in m.mount_point.parents):
            continue
        if m.fstype == "cgroup2":
            # A bind mount of a subtree (root != "/") is a container's view; keep the host's if both exist.
            if unified is None or m.root == "/":
                unified = m.mount_point
        elif m.fstype == "cgroup":
            for ctrl in m.controllers:
                if ctrl not in v1 or m.root == "/":
                    v1[ctrl] = m.mount_point
    real = {c: p for c, p in v1.items() if not c.startswith("name=")}
    if unified is None and not real:
        where = f" under {base}" if base is not None else ""
        raise CgroupError(f"no cgroup mounts found{where}")
    mode: Mode = "v2" if not real else ("hybrid" if unified is not None else "v1")
    controllers: frozenset[str] = frozenset()
    if unified is not None:
        try:
            controllers = frozenset((unified / "cgroup.controllers").read_text().split())
        except OSError:
            controllers = frozenset()
    return Hierarchy(
        mode=mode,
        v1=MappingProxyType(real),
        unified=unified,
        unified_controllers=controllers,
    )


def discover(mountinfo_path: str | Path = "/proc/self/mountinfo", base: Path | None = None) -> Hierarchy:
    """Read mountinfo and return the Hierarchy.

    `base` restricts discovery to mounts at or below it (e.g. a host's /sys/fs/cgroup bind-mounted into
    a container at /host/sys/fs/cgroup).
    """
    text = Path(mountinfo_path).read_text()
    return hierarchy_from_mounts(parse_mountinfo(text, str(mountinfo_path)), base)


def _probe_dir(hierarchy: Hierarchy) -> Path:
    for ctrl in ("cpu", "cpuacct", "memory", "pids", "cpuset"):
        if ctrl in hierarchy.v1:
            return hierarchy.v1[ctrl]
    return hierarchy.controller_dir("cpu")


def detect_driver(
    hierarchy: Hierarchy,
    kubepods: str = "kubepods",
    *,
    root: str | None = None,
    override: str | None = None,
) -> Driver:
    """Tell the kubelet's cgroup driver from what exists on disk; `override` (from config) wins.

    Without `root` it looks for `<kubepods>.slice` (systemd) or `<kubepods>` (cgroupfs) at the top of
    the hierarchy. With `root` (the agent's cgroup root, which is the kubepods directory itself) it
    looks inside it for `<kubepods>-besteffort.slice` / `<kubepods>-burstable.slice` (systemd) or
    `besteffort` / `burstable` (cgroupfs), else decides by the root's own name.
    """
    if override is not None:
        if override not in DRIVERS:
            raise ValueError(f"cgroup driver must be one of {DRIVERS}, got {override!r}")
        return "systemd" if override == "systemd" else "cgroupfs"
    top = _probe_dir(hierarchy)
    if root is not None:
        base = Path(join(str(top), check_rel(root, "cgroup root")))
        for tier in ("besteffort", "burstable"):
            if (base / f"{kubepods}-{tier}.slice").is_dir():
                return "systemd"
            if (base / tier).is_dir():
                return "cgroupfs"
        if base.name.endswith(".slice"):
            return "systemd"
        if base.is_dir() and any(e.endswith(".slice") for e in os.listdir(base)):
            return "systemd"
        if base.is_dir():
            return "cgroupfs"
    if (top / f"{kubepods}.slice").is_dir():
        return "systemd"
    if (top / kubepods).is_dir():
        return "cgroupfs"
    raise CgroupError(
        f"cannot tell the cgroup driver: neither {top / (kubepods + '.slice')} nor {top / kubepods} exists;"
        " set the driver (cgroupfs or systemd) in the configuration"
    )


def resolve_root(hierarchy: Hierarchy, root: str, driver: str = "auto") -> str:
    """The agent's root as it exists on this node: `kubepods` (cgroupfs) and `kubepods.slice` (systemd) name
    the same kubepods cgroup for the kubelet's two drivers, so a root named for one resolves to the other
    when only that one exists (a DaemonSet config then works on either kind of node). With a driver set,
    its own name is tried first; when neither exists the configured root is kept."""
    root = check_rel(root.strip("/"), "cgroup root")
    if not root:
        return root
    parent, _, leaf = root.rpartition("/")
    base = leaf.removesuffix(".slice")
    names = [leaf] + [n for n in (base, f"{base}.slice") if n != leaf]
    if driver == "systemd":
        names.sort(key=lambda n: not n.endswith(".slice"))
    elif driver == "cgroupfs":
        names.sort(key=lambda n: n.endswith(".slice"))
    top = _probe_dir(hierarchy)
    for name in names:
        rel = join(parent, name) if parent else name
        if (top / rel).is_dir():
            return rel
    return root
