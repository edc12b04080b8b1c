"""Start a real process directly inside a cgroup (every hierarchy), with no moment spent outside it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from cgroups.discovery import Hierarchy
from cgroups.paths import check_rel, join

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "freezer", "pids")


def procs_files(hierarchy: Hierarchy, root: str, rel: str) -> list[str]:
    """The `cgroup.procs` of `root/rel` in every hierarchy that has it (v1 controllers, then unified)."""
    path = join(check_rel(root, "cgroup root"), check_rel(rel))
    dirs: dict[str, None] = {}
    for ctrl in CONTROLLERS:
        if hierarchy.is_v1(ctrl):
            dirs[str(hierarchy.v1[ctrl])] = None
    if hierarchy.unified is not None:
        dirs[str(hierarchy.unified)] = None
    out = []
    for d in dirs:
        f = os.path.join(d, path, "cgroup.procs")
        if os.path.exists(f):
            out.append(f)
    return out


def spawn_in_cgroup(hierarchy: Hierarchy, root: str, rel: str, argv: Sequence[str],
                    **popen: object) -> subprocess.Popen[bytes]:
    """Popen `argv` with the child writing its own pid into the cgroup before it execs."""
    files = procs_files(hierarchy, root, rel)
    if not files:
        raise FileNotFoundError(f"cgroup {root}/{rel} does not exist in any hierarchy")

    def enter() -> None:
        pid = str(os.getpid()).encode()
        for f in files:
            fd = os.open(f, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        list(argv), preexec_fn=enter, **popen)  # noqa: PLW1509 - the child only writes its pid, then execs
    return proc


def workload_argv(kind: str, *args: object) -> list[str]:
    return [sys.executable, "-m", "agent.demo.workloads", kind, *map(str, args)]


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller ("" for cgroup2), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else [""]:
                out[ctrl] = path
    return out


def _mounts(hierarchy: Hierarchy) -> dict[str, str]:
    """Mount directory → the controller it is found under in /proc/self/cgroup, each mount once."""
    out: dict[str, str] = {}
    for ctrl in CONTROLLERS:
        if hierarchy.is_v1(ctrl):
            out.setdefault(str(hierarchy.v1[ctrl]), ctrl)
    if hierarchy.unified is not None:
        out.setdefault(str(hierarchy.unified), "")
    return out


def _write_pid(procs: str, pid: int) -> None:
    fd = os.open(procs, os.O_WRONLY)
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def move_self(hierarchy: Hierarchy, root: str, rel: str) -> list[tuple[str, str]]:
    """Move this process (all its threads) into `root/rel` in every hierarchy; return (mount, the
    `cgroup.procs` it was in) per hierarchy, for `move_back`."""
    own, back = _own_cgroups(), []
    path = join(check_rel(root, "cgroup root"), check_rel(rel))
    try:
        for mount, ctrl in _mounts(hierarchy).items():
            target = os.path.join(mount, path, "cgroup.procs")
            if ctrl in own and os.path.exists(target):
                back.append((mount, os.path.join(mount, own[ctrl].lstrip("/"), "cgroup.procs")))
                _write_pid(target, os.getpid())
    except OSError:
        move_back(back)  # never half inside: the caller would not know to move back
        raise
    return back


def move_back(back: list[tuple[str, str]]) -> None:
    """Return this process to where `move_self` took it from (the hierarchy's top if that cgroup is gone),
    so that the private tree can be removed without this process in it."""
    for mount, procs in back:
        try:
            _write_pid(procs, os.getpid())
        except OSError:
            _write_pid(os.path.join(mount, "cgroup.procs"), os.getpid())
