"""`remove_tree` on real cgroups: a process 12 levels deep is killed and the whole tree goes, any depth."""

from __future__ import annotations

import sys

import pytest
from kit.realcg import RealRoot

from agent.daemon.runtime import remove_tree
from cgroups.discovery import discover
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

pytestmark = pytest.mark.cgroups

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def _rw(real_root: RealRoot) -> tuple[CgroupReader, CgroupWriter]:
    hierarchy = discover()
    return CgroupReader(hierarchy, real_root.name), CgroupWriter(hierarchy, real_root.name)


def test_a_process_12_levels_deep_is_killed_and_the_tree_removed(real_root: RealRoot) -> None:
    deep = "/".join(f"l{i}" for i in range(12))
    real_root.mkcg("agent/" + deep)
    proc = real_root.spawn("agent/" + deep, SLEEP)
    reader, writer = _rw(real_root)
    assert remove_tree(writer, reader, "agent") == 0
    assert proc.wait(timeout=10) == -9
    assert not real_root.path("cpu", "agent").exists()
    assert not real_root.path("memory", "agent").exists()


def test_224_directories_are_all_removed(real_root: RealRoot) -> None:
    dirs = [f"agent/t{i}/w{j}" for i in range(14) for j in range(15)]  # 14 + 210 = 224 below agent
    for d in dirs:
        real_root.mkcg(d)
    reader, writer = _rw(real_root)
    assert remove_tree(writer, reader, "agent") == 0
    assert not real_root.path("cpu", "agent").exists()
    assert not real_root.path("memory", "agent").exists()
