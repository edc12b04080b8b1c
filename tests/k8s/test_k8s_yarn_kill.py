"""Killing YARN containers with REAL processes in REAL cgroups standing in for them: a private root under
the machine's cgroup controllers laid out as the kubelet and YARN's LinuxContainerExecutor do
(`besteffort/hadoop-yarn/container_*`), with a BE pod, an HP pod and a process in the YARN hierarchy
itself as neighbours that must survive. The container list comes from a local fake NodeManager serving
the documented `/ws/v1/node/containers` format (a real NodeManager cannot run here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from kit.clock import FakeClock
from kit.fakes.nodemanager import FakeNodeManager
from kit.realcg import RealRoot

from agent.config.sources import NodeManagerConfig
from agent.executors.yarn_kill import YarnKiller
from agent.sources.yarn import NodeManagerSource
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import Evict, EvictReason

pytestmark = pytest.mark.cgroups

TS = 1700000000000
GIB = 1 << 30
MIB = 1 << 20
NM_FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nodemanager"
AM1, W2, W3, W4 = (f"container_e17_{TS}_0001_01_00000{i}" for i in (1, 2, 3, 4))
AM2 = f"container_e17_{TS}_0002_01_000001"
PENDING = f"container_e17_{TS}_0001_01_000005"
SIZES = {AM1: (1, 1024), W2: (2, 2048), W3: (1, 1024), W4: (1, 2048), AM2: (1, 1024), PENDING: (1, 1024)}
POD_BE = "besteffort/pod0a1b2c3d-0000-4000-8000-0000000000b1"
POD_HP = "burstable/pod0a1b2c3d-0000-4000-8000-0000000000a1"
YARN_ROOT = "besteffort/hadoop-yarn"


@dataclass
class Node:
    root: RealRoot
    killer: YarnKiller
    reader: CgroupReader
    source: NodeManagerSource
    neighbours: list[psutil.Process]


def _container_doc(ids: list[str]) -> dict[str, object]:
    return {
        "containers": {
            "container": [
                {
                    "id": cid,
                    "state": "SCHEDULED" if cid == PENDING else "RUNNING",
                    "exitCode": -1000,
                    "diagnostics": "",
                    "user": "hadoop",
                    "totalVCoresNeeded": SIZES[cid][0],
                    "totalMemoryNeededMB": SIZES[cid][1],
                    "containerLogsLink": f"http://node-a:8042/node/containerlogs/{cid}/hadoop",
                    "nodeId": "node-a:45454",
                    "executionType": "GUARANTEED",
                    "containerLogFiles": [],
                }
                for cid in ids
            ]
        }
    }


@pytest.fixture
def node(real_root: RealRoot, tmp_path: Path, clock: FakeClock) -> Iterator[Node]:
    for name in ("info.json", "apps.json"):
        (tmp_path / name).write_bytes((NM_FIX / "3.x" / name).read_bytes())
    (tmp_path / "containers.json").write_text(json.dumps(_container_doc([AM1, W2, W3, W4, AM2, PENDING])))
    for cid in (AM1, W2, W3, W4, AM2):
        real_root.mkcg(f"{YARN_ROOT}/{cid}")
        # a task process with a child, as a YARN container runs its launch script and the JVM
        real_root.spawn(f"{YARN_ROOT}/{cid}", ["sh", "-c", "sleep 300 & sleep 300; wait"])
    neighbours = []
    for rel in (POD_BE, POD_HP, YARN_ROOT):
        real_root.mkcg(rel)
        neighbours.append(psutil.Process(real_root.spawn(rel, ["sleep", "300"]).pid))
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    writer = CgroupWriter(real_root.hierarchy, real_root.name)
    layout = Layout("cgroupfs")
    killer = YarnKiller(layout, reader, writer, grace_period_s=0.5, poll_s=0.02)
    with FakeNodeManager(tmp_path) as nm:
        cfg = NodeManagerConfig(enabled=True, url=nm.url, timeout_s=1, resync_s=1, stale_after_s=5)
        source = NodeManagerSource(cfg, layout, reader.children, cgroup_dir=reader.dir, clock=clock)
        yield Node(real_root, killer, reader, source, neighbours)


def _pids(node: Node, cid: str) -> list[int]:
    return node.root.pids(f"{YARN_ROOT}/{cid}")


def _wait_pids(node: Node, cid: str, count: int) -> None:
    import time

    deadline = time.monotonic() + 5
    while len(_pids(node, cid)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_pids(node, cid)) >= count


async def test_sigterm_ignored_escalates_to_sigkill(real_root: RealRoot) -> None:
    cid = f"container_{TS}_0003_01_000002"
    rel = real_root.mkcg(f"{YARN_ROOT}/{cid}")
    real_root.spawn(rel, ["sh", "-c", "trap '' TERM; sleep 300 & sleep 300; wait"])
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    killer = YarnKiller(
        Layout("cgroupfs"),
        reader,
        CgroupWriter(real_root.hierarchy, real_root.name),
        grace_period_s=0.3,
        poll_s=0.02,
    )
    import time

    deadline = time.monotonic() + 5
    while len(real_root.pids(rel)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    r = await killer.kill_container(cid)
    assert r.ok and r.escalated and r.seconds >= 0.3
    assert real_root.pids(rel) == []


async def test_hostile_or_missing_ids_touch_nothing(node: Node) -> None:
    _wait_pids(node, W2, 3)
    before = {c: _pids(node, c) for c in (AM1, W2)}
    for bad in (
        "container_../../burstable/pod0a1b2c3d-0000-4000-8000-0000000000a1",
        f"../{W2}",
        f"{W2}/..",
        f"{W2}\n",
        "",
        "pod0a1b2c3d-0000-4000-8000-0000000000a1",
    ):
        r = await node.killer.kill_container(bad)
        assert not r.ok and r.detail.startswith("refused"), bad
    missing = await node.killer.kill_container(PENDING)  # the NM knows it, no cgroup yet
    assert not missing.ok and "no cgroup" in missing.detail
    assert {c: _pids(node, c) for c in (AM1, W2)} == before
    assert all(p.is_running() for p in node.neighbours)


async def test_the_executor_protocol(node: Node) -> None:
    await node.source.refresh()
    by_key = {w.key: w for w in node.source.workloads().workloads}
    _wait_pids(node, W3, 3)
    action = Evict(f"yarn/{W3}", EvictReason.MEMORY_PRESSURE, "memory 75% ≥ 70%", 1000, GIB)
    done = await node.killer.evict(by_key[f"yarn/{W3}"], action)
    assert done.ok and "cgroup empty" in done.detail and _pids(node, W3) == []
    pending = await node.killer.evict(by_key[f"yarn/{PENDING}"], action)
    assert not pending.ok and pending.try_next
    assert "SIGTERM" in done.detail and "SIGKILL" not in done.detail  # well-behaved tasks need no escalation
    # Only the victim's cgroup was signalled: the other containers, the BE and HP pods, the NM-level process.
    for cid in (AM1, W2, W4, AM2):
        _wait_pids(node, cid, 3)  # still (or by now) all three processes: none was signalled
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in node.neighbours)
