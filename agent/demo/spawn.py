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
