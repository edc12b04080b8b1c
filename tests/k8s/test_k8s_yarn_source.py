"""The YARN NodeManager source: the documented `/ws/v1/node/{info,apps,containers}` payloads of Hadoop 2.x
and 3.x (checked-in fixtures: container states, epochs in ids, empty nodes, hostile entries), served by a
local fake NodeManager (a real one cannot run here), cross-checked against real `container_*` cgroups."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.clock import FakeClock
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.nodemanager import FakeNodeManager, no_cgroups
from kit.realcg import RealRoot
from kit.snapshot import node_snapshot

from agent.config.sources import KubeletConfig, NodeManagerConfig
from agent.sources.kubelet import KubeletSource
from agent.sources.yarn import (
    NmPayloadError,
    NodeManagerSource,
    parse_apps,
    parse_containers,
    parse_node_info,
)
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from qos.actions import Evict
from qos.batch import BatchConfig, BatchState, decide_batch, yarn_requested
from qos.ids import IdError, parse_app_id, parse_container_id
from qos.model import NodeSnapshot, Resources, Source, Tier

MIB = 1 << 20
TS = 1700000000000
NM = Path(__file__).resolve().parent.parent / "fixtures" / "nodemanager"


def _doc(version: str, name: str) -> object:
    return json.loads((NM / version / f"{name}.json").read_text())


# ------------------------------------------------------------------ payloads


def test_hadoop_2x_payloads() -> None:
    info = parse_node_info(_doc("2.x", "info"))
    assert (info.node_id, info.version, info.healthy, info.started_at_ms) == (
        "node-a:8041",
        "2.10.2",
        True,
        0,
    )
    assert info.total == Resources(8000, 8192 * MIB)
    apps, rejected = parse_apps(_doc("2.x", "apps"))
    assert rejected == [] and apps == {
        "application_1326121700862_0006": "RUNNING",
        "application_1326121700862_0005": "FINISHED",
    }
    containers, rejected = parse_containers(_doc("2.x", "containers"))
    assert rejected == []
    assert {c: v.state for c, v in containers.items()} == {
        "container_1326121700862_0006_01_000001": "RUNNING",
        "container_1326121700862_0006_01_000002": "RUNNING",
        "container_1326121700862_0006_01_000003": "LOCALIZING",
        "container_1326121700862_0006_01_000004": "KILLING",
        "container_1326121700862_0006_01_000005": "DONE",
    }
    am = containers["container_1326121700862_0006_01_000001"]
    assert am.requests == Resources(1000, 2048 * MIB)  # YARN MB are MiB
    assert am.cid.is_am and am.cid.epoch == 0 and am.cid.app_id == "application_1326121700862_0006"
    assert containers["container_1326121700862_0006_01_000002"].requests == Resources(2000, 1024 * MIB)


def test_hadoop_3x_payloads_with_epochs() -> None:
    info = parse_node_info(_doc("3.x", "info"))
    assert info.started_at_ms == 1714550000000 and info.total == Resources(16000, 16384 * MIB)
    containers, rejected = parse_containers(_doc("3.x", "containers"))
    assert rejected == []
    c = containers[f"container_e17_{TS}_0001_01_000002"]
    assert (c.cid.epoch, c.cid.cluster_ts, c.cid.app_seq, c.cid.attempt, c.cid.seq) == (17, TS, 1, 1, 2)
    assert c.requests == Resources(2000, 2048 * MIB) and c.execution_type == "GUARANTEED"
    assert containers[f"container_e17_{TS}_0001_01_000004"].state == "SCHEDULED"
    assert containers[f"container_{TS}_0002_01_000003"].cid.epoch == 0  # issued before the RM restart
    assert {v.state for v in containers.values()} >= {
        "RUNNING",
        "REINITIALIZING",
        "PAUSED",
        "EXITED_WITH_FAILURE",
    }
    apps, rejected = parse_apps(_doc("3.x", "apps"))
    assert rejected == [] and apps[f"application_{TS}_0003"] == "APPLICATION_RESOURCES_CLEANINGUP"


@pytest.mark.parametrize("version", ["empty-2.x", "empty-3.x"])
def test_empty_node(version: str) -> None:
    assert parse_containers(_doc(version, "containers")) == ({}, [])
    assert parse_apps(_doc(version, "apps")) == ({}, [])


def test_a_lone_container_object_is_a_list_of_one() -> None:
    one = _doc("3.x", "containers")["containers"]["container"][0]  # type: ignore[index]
    containers, _ = parse_containers({"containers": {"container": one}})
    assert list(containers) == [f"container_e17_{TS}_0001_01_000001"]


def test_hostile_entries_are_rejected_with_reasons() -> None:
    containers, rejected = parse_containers(_doc("hostile", "containers"))
    # An unknown state is kept and counted as live (the safe reading, `holds_resources`).
    assert list(containers) == [f"container_e17_{TS}_0001_01_000002", f"container_e17_{TS}_0001_01_000009"]
    assert containers[f"container_e17_{TS}_0001_01_000009"].state == "HACKED"
    text = "\n".join(rejected)
    assert len(rejected) == 7, text
    for needle in (
        "'container_../../../../etc' has characters outside",
        "/../../x' has characters outside",
        f"'container_{TS}_1_1_1' does not match",
        "totalVCoresNeeded: 1000000000000 is out of range",
        "totalMemoryNeededMB: -5 is out of range",
        "totalVCoresNeeded: expected an integer",
        "_000010\\n' has characters outside",
    ):
        assert needle in text, needle
    apps, rejected_apps = parse_apps(_doc("hostile", "apps"))
    assert list(apps) == [f"application_{TS}_0001"] and "application_../../x" in rejected_apps[0]


@pytest.mark.parametrize(
    "doc", [{"foo": 1}, {"containers": []}, {"containers": {"container": "x"}}, [], None]
)
def test_not_a_containers_document(doc: object) -> None:
    with pytest.raises(NmPayloadError):
        parse_containers(doc)


@pytest.mark.parametrize(
    "text",
    [
        "container_e17_1700000000000_0001_01_000001/..",
        "container_1700000000000_0001_1_000001",
        "container_e0_1700000000000_0001_01_000001",
        "container_e00_1700000000000_0001_01_000001",
        "container_01700000000000_0001_01_000001",
        "container_1700000000000_00001_01_000001",
        "container_1700000000000_0001_01_000000",
        " container_1700000000000_0001_01_000001",
        "",
        17,
        None,
    ],
)
def test_container_ids_are_strict(text: object) -> None:
    with pytest.raises(IdError):
        parse_container_id(text)


def test_container_id_order_is_oldest_to_newest() -> None:
    ids = [
        f"container_{TS}_0001_01_000002",
        f"container_e17_{TS}_0001_01_000001",
        f"container_e17_{TS}_0001_01_000003",
        f"container_{TS}_0002_01_000001",
        f"container_e17_{TS}_0001_01_1000000",
    ]
    assert [c.text for c in sorted(map(parse_container_id, ids))] == [
        f"container_{TS}_0001_01_000002",
        f"container_e17_{TS}_0001_01_000001",
        f"container_e17_{TS}_0001_01_000003",
        f"container_e17_{TS}_0001_01_1000000",
        f"container_{TS}_0002_01_000001",
    ]
    assert parse_app_id(f"application_{TS}_10000") == f"application_{TS}_10000"
    with pytest.raises(IdError):
        parse_app_id(f"application_{TS}_01000x")


# ------------------------------------------------------------------ the source


def _cfg(url: str = "", port: int = 8042, **kw: object) -> NodeManagerConfig:
    return NodeManagerConfig(
        enabled=True, url=url, port=port, timeout_s=2.0, resync_s=1.0, stale_after_s=5.0, **kw
    )  # type: ignore[arg-type]


@pytest.mark.cgroups
async def test_cross_check_with_real_cgroups(
    real_root: RealRoot, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    layout = Layout("cgroupfs")
    with_cgroup = [f"container_e17_{TS}_0001_01_00000{i}" for i in (1, 2, 3)] + [
        f"container_e17_{TS}_0002_01_000001",
        f"container_e17_{TS}_0002_01_000002",
        f"container_{TS}_0002_01_000003",
        f"container_e17_{TS}_0002_01_000004",
    ]
    orphan = f"container_e17_{TS}_0009_01_000001"
    for cid in [*with_cgroup, orphan, "not-a-container"]:
        real_root.mkcg(f"besteffort/hadoop-yarn/{cid}")
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    with FakeNodeManager(NM / "3.x") as nm:
        src = NodeManagerSource(
            _cfg(nm.url, priority=5100), layout, reader.children, cgroup_dir=reader.dir, clock=clock
        )
        with caplog.at_level(logging.WARNING, "coloc.sources.yarn"):
            await src.refresh()
            res = src.workloads()
    assert res.stale_reason is None
    by_key = {w.key: w for w in res.workloads}
    pending = f"container_e17_{TS}_0001_01_000004"
    assert set(by_key) == {f"yarn/{c}" for c in [*with_cgroup, orphan, pending]}  # DONE without cgroup: gone
    am = by_key[f"yarn/container_e17_{TS}_0001_01_000001"]
    assert (am.source, am.tier, am.be, am.priority, am.is_yarn_am) == (
        Source.YARN,
        Tier.BESTEFFORT,
        True,
        5100,
        True,
    )
    assert am.cgroup == f"besteffort/hadoop-yarn/container_e17_{TS}_0001_01_000001"
    assert am.app_id == f"application_{TS}_0001" and am.requests == Resources(1000, 1024 * MIB)
    assert am.started_at > time.time() - 60  # the cgroup's ctime
    assert by_key[f"yarn/container_e17_{TS}_0001_01_000002"].requests == Resources(2000, 2048 * MIB)
    # A container the NM schedules but whose cgroup is not there yet: pending, its allocation counts.
    info = res.containers[f"yarn/{pending}"]
    assert (info.has_cgroup, info.known_to_nm, info.state) == (False, True, "SCHEDULED")
    assert by_key[f"yarn/{pending}"].requests == Resources(1000, 1024 * MIB)
    # A cgroup the NM does not list is still BE usage, with no allocation.
    o = res.containers[f"yarn/{orphan}"]
    assert (o.known_to_nm, o.has_cgroup) == (False, True)
    assert by_key[f"yarn/{orphan}"].requests == Resources() and by_key[f"yarn/{orphan}"].be
    exited = by_key[f"yarn/container_e17_{TS}_0002_01_000004"]  # EXITED_WITH_FAILURE, cgroup left
    assert exited.terminating and exited.requests == Resources()  # usage still, no allocation
    assert yarn_requested(res.workloads) == Resources(
        (1 + 2 + 1 + 1 + 1 + 1 + 1) * 1000, (1024 + 2048 + 2048 + 1024 + 1536 + 1024 + 512) * MIB
    )
    assert any("not-a-container" in r.getMessage() for r in caplog.records)


async def test_hadoop_2x_states_without_cgroups(clock: FakeClock) -> None:
    with FakeNodeManager(NM / "2.x") as nm:
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), no_cgroups, clock=clock)
        await src.refresh()
    res = src.workloads()
    states = {i.container_id[-6:]: (i.state, i.has_cgroup) for i in res.containers.values()}
    assert states == {
        "000001": ("RUNNING", False),
        "000002": ("RUNNING", False),
        "000003": ("LOCALIZING", False),
        "000004": ("KILLING", False),
    }
    killing = next(w for w in res.workloads if w.key.endswith("000004"))
    assert killing.terminating
    assert src.node_info is not None and src.node_info.version == "2.10.2"
    assert src.applications()["application_1326121700862_0005"] == "FINISHED"


async def test_empty_node_is_fresh_not_stale(clock: FakeClock) -> None:
    with FakeNodeManager(NM / "empty-2.x") as nm:
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), no_cgroups, clock=clock)
        await src.refresh()
    res = src.workloads()
    assert res.workloads == () and res.stale_reason is None


async def test_discovered_through_the_kubelet(clock: FakeClock, tmp_path: Path) -> None:
    kubelet_dir = Path(__file__).resolve().parent.parent / "fixtures" / "kubelet"
    doc = json.loads((kubelet_dir / "podlist-mixed.json").read_text())
    with FakeNodeManager(NM / "3.x") as nm, FakeKubelet(kubelet_dir / "podlist-mixed.json") as kubelet:
        ks = KubeletSource(
            KubeletConfig(url=kubelet.url, token_file="", timeout_s=0.5, resync_s=1, stale_after_s=5),
            Layout("cgroupfs"),
            clock=clock,
        )
        src = NodeManagerSource(_cfg(port=nm.port), Layout("cgroupfs"), no_cgroups, kubelet=ks, clock=clock)
        await src.refresh()  # the kubelet has not answered yet: nothing to discover
        reason = src.workloads().stale_reason
        assert reason is not None and "no running NodeManager pod" in reason
        await ks.refresh()
        await src.refresh()  # hostNetwork: localhost:<port>
        assert src.workloads().stale_reason is None and nm.seen("GET", "/ws/v1/node/containers")

        nm_pod = next(p for p in doc["items"] if p["metadata"]["name"] == "yarn-nm-0")
        nm_pod["spec"]["hostNetwork"] = False
        nm_pod["status"]["podIP"] = "127.0.0.1"
        nm_pod["status"]["podIPs"] = [{"ip": "127.0.0.1"}]
        moved = tmp_path / "podlist.json"
        moved.write_text(json.dumps(doc))
        kubelet.serve(moved)
        await ks.refresh()
        before = len(nm.requests)
        await src.refresh()  # pod IP
        assert src.workloads().stale_reason is None and len(nm.requests) == before + 3


def _snapshot(workloads: tuple, stale: dict[str, str]) -> NodeSnapshot:  # type: ignore[type-arg]
    return node_snapshot(workloads, capacity=Resources(16000, 1 << 36), cpus=(0, 1), stale=stale)


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("down", "down:"),
        ("slow", "timeout:"),
        ("garbage", "garbage:"),
        ("truncated", "truncated:"),
        ("error500", "HTTP 500"),
    ],
)
async def test_nodemanager_outage(
    mode: str, expect: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    nm = FakeNodeManager(NM / "3.x").start()
    try:
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), no_cgroups, clock=clock)
        await src.refresh()
        good = src.workloads()
        assert good.stale_reason is None and len(good.workloads) == 8  # DONE without a cgroup is gone
        if mode == "down":
            nm.stop()
        else:
            nm.mode = mode
        clock.advance(1)
        with caplog.at_level(logging.WARNING, "coloc.sources.yarn"):
            await src.refresh()
        lines = [r.getMessage() for r in caplog.records if r.name == "coloc.sources.yarn"]
        assert len(lines) == 1 and expect in lines[0], lines
        assert src.workloads().workloads == good.workloads and src.workloads().stale_reason is None
        clock.advance(5)
        await src.refresh()
        stale = src.workloads()
        assert stale.workloads == good.workloads
        assert stale.stale_reason is not None and expect in stale.stale_reason
        # k8s + yarn far over an origin of 1 core, but YARN data is stale: no eviction, a Hold says why.
        actions, _ = decide_batch(
            dataclasses.replace(_snapshot(stale.workloads, {"yarn": stale.stale_reason}),
                                origin_annotation='{"resources":{"kubernetes.io/batch-cpu":"1000"}}'),
            BatchConfig(),
            BatchState(),
        )
        assert actions and not any(isinstance(a, Evict) for a in actions)
        if mode == "down":
            nm.start()
        nm.mode = "ok"
        await src.refresh()
        assert src.workloads().stale_reason is None
    finally:
        nm.stop()


async def test_hostile_payload_keeps_the_valid_entries(clock: FakeClock) -> None:
    with FakeNodeManager(NM / "hostile") as nm:
        src = NodeManagerSource(_cfg(nm.url), Layout("cgroupfs"), no_cgroups, clock=clock)
        await src.refresh()
    res = src.workloads()
    assert [w.key for w in res.workloads] == [
        f"yarn/container_e17_{TS}_0001_01_000002",
        f"yarn/container_e17_{TS}_0001_01_000009",  # unknown state: counted as live
    ]
    assert len(res.rejected) == 8 and res.stale_reason is None
    assert all(
        w.cgroup.startswith("besteffort/hadoop-yarn/container_") and ".." not in w.cgroup
        for w in res.workloads
    )


@st.composite
def container_ids(draw: st.DrawFn) -> tuple[str, bool]:
    """A well-formed container id, or one with a hostile character spliced in (second item: spliced)."""
    epoch = draw(st.integers(0, 300))
    text = (
        f"container_{f'e{epoch:02d}_' if epoch else ''}{draw(st.integers(1, 10**13))}_"
        f"{draw(st.integers(1, 10**6)):04d}_{draw(st.integers(1, 300)):02d}_{draw(st.integers(1, 10**9)):06d}"
    )
    if not draw(st.booleans()):
        return text, False
    at = draw(st.integers(0, len(text)))
    bad = draw(st.sampled_from(["/", "..", "../", "\n", "\x00", " ", "-", "."]))
    return text[:at] + bad + text[at:], True


@given(container_ids())
@settings(max_examples=300, deadline=None)
def test_any_accepted_id_is_one_plain_path_component(case: tuple[str, bool]) -> None:
    text, spliced = case
    try:
        cid = parse_container_id(text)
    except IdError:
        assert spliced
        return
    assert not spliced
    rel = Layout("cgroupfs").yarn_container(cid.text)
    assert rel == f"besteffort/hadoop-yarn/{text}"
    assert parse_container_id(cid.text) == cid and cid.app_id.startswith("application_")
