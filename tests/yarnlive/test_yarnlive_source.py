"""Only live YARN work is requested. A NodeManager answer in its real `/ws/v1/node/containers` format
(checked-in fixture `nodemanager/yarnlive-mixed`: live and terminal containers mixed) is served by the local
fake NodeManager HTTP server (a real NodeManager cannot run here); the source's workloads go through the
real batch policy and the real state ledger. Dying containers keep their cgroup (usage) but hold nothing.
Container sizes are bounded by the node's capacity, not by an absurd constant."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.nodemanager import FakeNodeManager, no_cgroups
from kit.realcg import RealRoot
from kit.snapshot import node_snapshot
from yarnkit import DYING_WITH_STATE, LIVE, LIVE_TOTAL, MIB, MIXED, cid

from agent.config.sources import NodeManagerConfig
from agent.sources.result import SourceResult
from agent.sources.yarn import NodeManagerSource
from agent.state.ledger import Ledger, LedgerConfig
from agent.state.records import figures
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from qos.actions import Evict
from qos.batch import BatchConfig, BatchState, decide_batch, ledger_view, yarn_requested
from qos.model import NodeSnapshot, Resources, Workload

GIB = 1 << 30


def _cfg(url: str) -> NodeManagerConfig:
    return NodeManagerConfig(enabled=True, url=url, timeout_s=1.0, resync_s=1.0, stale_after_s=5.0,
                             priority=5000)


def _snapshot(workloads: tuple[Workload, ...], at: float = 100.0) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=at, cpus=(0, 1), stale={})


async def _read(fixture_dir: Path, children: Callable[[str], list[str]] = no_cgroups,
                capacity: Resources | None = None, cgroup_dir: Callable[[str], str] | None = None
                ) -> SourceResult:
    with FakeNodeManager(fixture_dir) as nm:
        kw: dict[str, object] = {} if capacity is None else {"capacity": capacity}
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), children, clock=FakeClock(),
                                cgroup_dir=cgroup_dir, **kw)  # type: ignore[arg-type]
        await src.refresh()
        assert nm.seen("GET", "/ws/v1/node/containers")
    res = src.workloads()
    assert res.stale_reason is None
    return res


async def test_requested_total_is_the_live_containers_only() -> None:
    """Fake NodeManager (real REST format) with 5 live and 7 terminal containers, no cgroups."""
    res = await _read(MIXED)
    assert yarn_requested(res.workloads) == LIVE_TOTAL == Resources(6000, 5120 * MIB)
    by_key = {w.key: w for w in res.workloads}
    for text in LIVE:
        assert by_key[f"yarn/{text}"].requests != Resources() and not by_key[f"yarn/{text}"].terminating
    for text, state in DYING_WITH_STATE.items():
        w = by_key.get(f"yarn/{text}")
        assert w is None or (w.requests == Resources() and w.terminating), (state, w)


async def test_overcommit_arbitration_ignores_dying_containers() -> None:
    """Origin 7 cores: the 6 live cores fit; counting the 6 cores of dying containers would evict."""
    res = await _read(MIXED)
    snap = _snapshot(res.workloads)
    origin = '{"resources":{"kubernetes.io/batch-cpu":"7000","kubernetes.io/batch-memory":"68719476736"}}'
    view = ledger_view(Resources(7000, 64 * GIB), snap.workloads)
    assert not view.overcommitted and view.yarn_requested == LIVE_TOTAL
    snap = dataclasses.replace(snap, origin_annotation=origin)
    actions, _ = decide_batch(snap, BatchConfig(), BatchState())
    assert not [a for a in actions if isinstance(a, Evict)], actions


@pytest.mark.cgroups
async def test_dying_containers_keep_usage_but_hold_no_ledger_allocation(real_root: RealRoot) -> None:
    """Real `container_*` cgroups for live and dying containers (a real process in the EXITED one); the NM
    answers come from the fake NodeManager; the real ledger is synced with the source's snapshot."""
    with_cgroup = [cid(1, 1), cid(1, 2), cid(2, 1), cid(1, 4), cid(1, 5), cid(1, 6)]
    for text in with_cgroup:
        real_root.mkcg(f"besteffort/hadoop-yarn/{text}")
    real_root.spawn(f"besteffort/hadoop-yarn/{cid(1, 4)}", ["sleep", "60"])
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    res = await _read(MIXED, reader.children, cgroup_dir=reader.dir)
    keys = {w.key for w in res.workloads}
    # Dying containers with a cgroup stay visible as BE workloads: their usage is still usage.
    for text in (cid(1, 4), cid(1, 5), cid(1, 6)):
        assert f"yarn/{text}" in keys and res.containers[f"yarn/{text}"].has_cgroup
    ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None), boot_id="b", incarnation="i",
                    clock=lambda: 100.0)
    ledger.sync(_snapshot(res.workloads), Resources(8000, 32 * GIB), 100.0)
    view = ledger.view()
    assert {a.key for a in view.allocations} == {f"yarn/{t}" for t in LIVE}
    assert ledger.batch_allocated == LIVE_TOTAL
    assert figures(view).yarn_requested == LIVE_TOTAL


async def test_a_container_that_exits_leaves_the_ledger(tmp_path: Path) -> None:
    """The NodeManager first reports a container RUNNING, then EXITED_WITH_SUCCESS (same REST format, from
    the fake NodeManager): its allocation leaves the ledger and the requested total at once."""
    doc = json.loads((MIXED / "containers.json").read_text())
    for name in ("info.json", "apps.json"):
        (tmp_path / name).write_bytes((MIXED / name).read_bytes())
    (tmp_path / "containers.json").write_text(json.dumps(doc))
    # Its cgroup is still there (the NM has not cleaned up yet): a cgroup listing that names it.
    exiting = cid(1, 2)
    children = lambda rel: [f"{rel}/{exiting}"]  # noqa: E731
    ledger = Ledger(LedgerConfig(node_id="node-a", state_path=None), boot_id="b", incarnation="i",
                    clock=lambda: 100.0)
    with FakeNodeManager(tmp_path) as nm:
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), children, clock=FakeClock())
        await src.refresh()
        ledger.sync(_snapshot(src.workloads().workloads), Resources(8000, 32 * GIB), 100.0)
        assert ledger.allocation(f"yarn/{exiting}") is not None
        assert ledger.batch_allocated == LIVE_TOTAL
        for c in doc["containers"]["container"]:
            if c["id"] == exiting:
                c["state"] = "EXITED_WITH_SUCCESS"
        nm.docs["/ws/v1/node/containers"] = json.dumps(doc).encode()
        await src.refresh()
    res = src.workloads()
    assert f"yarn/{exiting}" in {w.key for w in res.workloads}  # its cgroup is still usage
    ledger.sync(_snapshot(res.workloads, at=101.0), Resources(8000, 32 * GIB), 101.0)
    assert ledger.allocation(f"yarn/{exiting}") is None
    assert ledger.batch_allocated == LIVE_TOTAL - Resources(2000, 2048 * MIB)
    assert yarn_requested(res.workloads) == LIVE_TOTAL - Resources(2000, 2048 * MIB)


async def test_an_unknown_state_counts_as_holding_resources(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A state this agent does not know (a newer NodeManager) is read as live: HP is never overcommitted
    by a container the agent failed to count. Served by the fake NodeManager in the real REST format."""
    doc = json.loads((MIXED / "containers.json").read_text())
    for name in ("info.json", "apps.json"):
        (tmp_path / name).write_bytes((MIXED / name).read_bytes())
    doc["containers"]["container"][0]["state"] = "SUSPENDED_FOR_UPGRADE"
    (tmp_path / "containers.json").write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, "coloc.sources.yarn"):
        res = await _read(tmp_path)
    assert yarn_requested(res.workloads) == LIVE_TOTAL
    assert res.containers[f"yarn/{cid(1, 1)}"].state == "SUSPENDED_FOR_UPGRADE"
    assert any("SUSPENDED_FOR_UPGRADE" in r.getMessage() and cid(1, 1) in r.getMessage()
               for r in caplog.records)


def _resized(tmp_path: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    doc = json.loads((MIXED / "containers.json").read_text())
    for c in doc["containers"]["container"]:
        if c["id"] in sizes:
            c["totalVCoresNeeded"], c["totalMemoryNeededMB"] = sizes[c["id"]]
    for name in ("info.json", "apps.json"):
        (tmp_path / name).write_bytes((MIXED / name).read_bytes())
    (tmp_path / "containers.json").write_text(json.dumps(doc))
    return tmp_path


async def test_containers_beyond_the_node_capacity_are_dropped_with_a_reason(tmp_path: Path) -> None:
    """Node of 2 CPUs and 4 GiB; the fake NodeManager lists one container of 100000 vcores, one of 3 vcores
    and one of 4097 MiB, among others. Those are dropped, each with a reason naming it and the field; the
    rest of the list is kept, and a container of exactly the node's size is accepted."""
    absurd, too_many, too_big, exact = cid(1, 1), cid(1, 2), cid(2, 1), cid(2, 2)
    fixture = _resized(tmp_path, {absurd: (100000, 1024), too_many: (3, 1024), too_big: (1, 4097),
                                  exact: (2, 4096)})
    res = await _read(fixture, capacity=Resources(2000, 4 * GIB))
    keys = {w.key for w in res.workloads}
    assert not keys & {f"yarn/{absurd}", f"yarn/{too_many}", f"yarn/{too_big}"}
    assert {f"yarn/{exact}", f"yarn/{cid(1, 3)}"} <= keys
    assert yarn_requested(res.workloads) == Resources(2000 + 1000, (4096 + 512) * MIB)
    text = "\n".join(res.rejected)
    assert len(res.rejected) == 3, text
    for container, field in ((absurd, "totalVCoresNeeded"), (too_many, "totalVCoresNeeded"),
                             (too_big, "totalMemoryNeededMB")):
        line = next((r for r in res.rejected if container in r), "")
        assert field in line and "capacity" in line, (container, text)


async def test_capacity_bound_uses_milli_cpu_of_a_fractional_node(tmp_path: Path) -> None:
    """A node of 1.5 CPUs (1500 milli-CPU) takes a 1-vcore container, not a 2-vcore one."""
    fixture = _resized(tmp_path, {cid(1, 1): (2, 1024)})
    res = await _read(fixture, capacity=Resources(1500, 64 * GIB))
    assert [r for r in res.rejected if cid(1, 1) in r and "totalVCoresNeeded" in r]
    assert f"yarn/{cid(1, 1)}" not in {w.key for w in res.workloads}
    assert f"yarn/{cid(1, 3)}" in {w.key for w in res.workloads}
