"""The agent's own cgroup tree: the QoS tiers laid out as the kubelet lays them, and a subtree removed with
whatever still runs in it (the agent at start-up and exit, the demo and the benches)."""

from __future__ import annotations

import contextlib
import logging
import time

from cgroups.errors import CgroupError, InvalidValue
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

log = logging.getLogger("coloc.runtime")

BE_TIER = "besteffort"
BE_SHARES = 2  # what the kubelet gives the besteffort tier


def setup_tiers(writer: CgroupWriter, reader: CgroupReader, cpus: tuple[int, ...], layout: Layout,
                made: list[str] | None = None) -> bool:
    """Lay the tiers out as the kubelet does (besteffort `cpu.shares` 2), named as the driver names them;
    return whether the root was new. Each cgroup it is about to make is appended to `made`."""
    created = not reader.exists("")
    be = layout.tier(BE_TIER)
    for rel in ("", layout.tier("burstable"), be, layout.yarn_root()):
        if made is not None and not reader.exists(rel):
            made.append(rel)  # before mkdir: one that fails half-way (one hierarchy made) is undone too
        writer.mkdir(rel)
        writer.set_cpuset(rel, cpus)
    with contextlib.suppress(InvalidValue):
        # A restart finds cpu.idle=1 left by the previous incarnation, and the kernel refuses a weight
        # change while a cgroup is idle: the shares were set when it was made idle.
        writer.set_cpu_shares(be, BE_SHARES)
    return created


def _subtree(reader: CgroupReader, rel: str) -> list[str]:
    """`rel` and every cgroup below it at any depth, parents before children (iterative: no depth cap)."""
    out, todo = [], [rel]
    while todo:
        cur = todo.pop()
        out.append(cur)
        with contextlib.suppress(CgroupError, OSError):
            todo.extend(reader.children(cur))
    return out


def remove_tree(writer: CgroupWriter, reader: CgroupReader, rel: str) -> int:
    """Kill what is left in `rel` and below (through each cgroup's `cgroup.procs`), then remove the whole
    subtree deepest first, going on past any directory that will not go; return how many would not."""
    tree = _subtree(reader, rel)
    for sub in reversed(tree):
        with contextlib.suppress(CgroupError, OSError):
            if reader.pids(sub):
                writer.kill_all(sub, 9)
                deadline = time.monotonic() + 5
                while reader.pids(sub) and time.monotonic() < deadline:
                    time.sleep(0.02)
    failed = 0
    for sub in sorted(tree, key=lambda r: -r.count("/") - (r != "")):
        try:
            writer.rmdir(sub, recursive=True)
        except (CgroupError, OSError) as err:
            failed += 1
            log.warning("cgroup not removed", extra={"fields": {"cgroup": sub, "error": str(err)}})
    return failed
