"""The guest is the node the suite means: pure cgroup v2 with systemd as init, run as root with every
capability, and the test kit's claim (tests/kit/realcg.py) that it works on such a host holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kit.realcg import RealRoot

from cgroups.discovery import discover

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

CAP_SYS_RESOURCE = 24


def test_pure_v2_with_systemd_as_init() -> None:
    h = discover()
    assert h.mode == "v2", h
    assert h.unified == Path("/sys/fs/cgroup") and not h.v1
    assert {"cpu", "cpuset", "io", "memory", "pids"} <= h.unified_controllers
    assert Path("/proc/1/comm").read_text().strip() == "systemd"
    assert Path("/proc/self/cgroup").read_text().startswith("0::/system.slice/")


def test_root_has_cap_sys_resource() -> None:
    """Sub-2 s PSI trigger windows need it: the PSI-trigger fast path runs as designed only with it."""
    caps = int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("CapEff:")).split()[1], 16)
    assert os.geteuid() == 0 and caps & (1 << CAP_SYS_RESOURCE)


def test_real_root_on_pure_v2(real_root: RealRoot) -> None:
    """tests/kit/realcg.py on pure v2: one root in the unified tree, controllers handed down to children,
    processes in leaves only, and a full teardown."""
    assert real_root.hierarchy.mode == "v2" and list(real_root.mounts) == ["unified"]
    rel = real_root.mkcg("besteffort/pod")
    proc = real_root.spawn(rel, ["sleep", "60"])
    assert real_root.pids(rel) == [proc.pid]
    for parent in ("", "besteffort"):
        enabled = (real_root.path("unified", parent) / "cgroup.subtree_control").read_text().split()
        assert {"cpu", "cpuset", "memory", "pids"} <= set(enabled), (parent, enabled)
    assert (real_root.path("unified", rel) / "cpu.max").exists()
