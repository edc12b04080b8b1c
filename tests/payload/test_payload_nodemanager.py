"""Bounded, off-loop NodeManager payloads. A local fake NodeManager (YARN cannot run here) serves the
checked-in Hadoop 3.x documents, the container list grown with copies of its real entries."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from kit.fakes.nodemanager import FakeNodeManager
from kit.payload import FIX

from agent.config.sources import NodeManagerConfig
from agent.sources.fetch_errors import FETCH_ERRORS
from agent.sources.yarn import NodeManagerSource
from cgroups.layout import Layout

NM = FIX / "nodemanager" / "3.x"


def _containers_body(min_bytes: int) -> bytes:
    doc = json.loads((NM / "containers.json").read_text())
    template = doc["containers"]["container"][0]
    items = []
    i = 0
    while len(json.dumps(items)) < min_bytes:
        for _ in range(1000):
            c = copy.deepcopy(template)
            c["id"] = f"container_e17_1700000000000_0001_01_{i + 100:06d}"
            items.append(c)
            i += 1
    return json.dumps({"containers": {"container": items}}).encode()


def _source(url: str) -> NodeManagerSource:
    return NodeManagerSource(NodeManagerConfig(enabled=True, url=url, timeout_s=10, resync_s=10,
                                               stale_after_s=30), Layout("cgroupfs"), lambda rel: [])


async def test_containers_over_the_default_cap_make_yarn_stale(tmp_path: Path) -> None:
    cap = NodeManagerConfig().max_body_bytes
    before = FETCH_ERRORS.get().get(("yarn", "too_large"), 0)
    with FakeNodeManager(NM) as nm:
        nm.docs["/ws/v1/node/containers"] = _containers_body(cap + 1)
        src = _source(nm.url)
        await src.refresh()
    res = src.workloads()
    assert res.workloads == ()
    assert res.stale_reason is not None and "too_large" in res.stale_reason, res.stale_reason
    assert FETCH_ERRORS.get()[("yarn", "too_large")] == before + 1


async def test_a_large_container_list_under_the_cap_is_parsed() -> None:
    with FakeNodeManager(NM) as nm:
        nm.docs["/ws/v1/node/containers"] = _containers_body(NodeManagerConfig().max_body_bytes // 2)
        src = _source(nm.url)
        await src.refresh()
    res = src.workloads()
    assert res.stale_reason is None, res.stale_reason
    assert len(res.workloads) > 1000
