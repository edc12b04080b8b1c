"""Standalone scan caches: a workload is built once per cgroup and the list once per change of a directory
listing, yet every tick's snapshot holds exactly the cgroups there are, as a scan from scratch finds them.

Real cgroups under a private root; the agent's real runtime (reader, scanner, collector) in dry run, ticked
by hand. Swaps (one cgroup removed and another made between two ticks) keep every directory's link count:
the listing itself, not a directory's mtime or nlink, must show them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kit.realcg import RealRoot

from agent.config.agent import AgentConfig, CgroupConfig, EvictionConfig, LoopConfig, NodeConfig, StateConfig
from agent.config.standalone import LocalWorkload, StandaloneConfig
from agent.daemon.runtime import Runtime, build
from agent.sources.standalone import StandaloneScanner
from qos.model import Tier, Workload

pytestmark = pytest.mark.cgroups


@pytest.fixture
def rt(real_root: RealRoot) -> Iterator[Runtime]:
    cfg = AgentConfig(
        node=NodeConfig(name="test-node", cpus=2, memory="1Gi", scope="cgroup-root"),
        cgroups=CgroupConfig(root=real_root.name, setup_tiers=True, cleanup_on_exit=False),
        loop=LoopConfig(interval_s=1.0, fast_path=False),
        eviction=EvictionConfig(dry_run=True),
        state=StateConfig(path=""),
        standalone=StandaloneConfig(workloads=(LocalWorkload(cgroup="pod-a", priority=7),)),
    )
    runtime = build(cfg)
    try:
        yield runtime
    finally:
        runtime.collector.close()
        runtime.reader.close()


def _rmcg(real_root: RealRoot, rel: str) -> None:
    for d in real_root.dirs(rel):
        d.rmdir()


def _fresh(rt: Runtime) -> list[Workload]:
    """What a scanner with no history lists now (same wiring as the runtime's)."""
    old = rt.sources.scanner
    assert old is not None
    scanner = StandaloneScanner(rt.cfg.standalone, old._children, old._be, old._burstable, old._yarn,
                                old._dir_of)
    return scanner.scan()


def _tick(rt: Runtime) -> dict[str, Workload]:
    """One tick; its snapshot's workloads by cgroup, checked against a scan from scratch."""
    snap = rt.loop.tick().snapshot
    assert snap is not None
    assert [w.key for w in snap.workloads] == [w.key for w in _fresh(rt)]
    return {w.cgroup: w for w in snap.workloads}


def test_cgroups_made_and_removed_between_ticks_are_in_the_next_snapshot(real_root: RealRoot,
                                                                         rt: Runtime) -> None:
    for rel in ("pod-a", "besteffort/pod-b"):
        real_root.mkcg(rel)
        real_root.spawn(rel, ["sleep", "60"])
    first = _tick(rt)
    assert set(first) == {"pod-a", "besteffort/pod-b"}
    assert first["pod-a"].priority == 7 and first["besteffort/pod-b"].be

    real_root.mkcg("pod-c")
    real_root.mkcg("burstable/pod-d")
    second = _tick(rt)
    assert set(second) == {"pod-a", "besteffort/pod-b", "pod-c", "burstable/pod-d"}
    assert second["burstable/pod-d"].tier is Tier.BURSTABLE
    assert second["pod-c"].usage.milli_cpu is None  # first sighting: no rate yet
    assert second["pod-a"].usage.milli_cpu is not None
    assert second["pod-a"].started_at == first["pod-a"].started_at

    _rmcg(real_root, "pod-c")  # a swap: the root's link count is what it was
    real_root.mkcg("pod-e")
    _rmcg(real_root, "burstable/pod-d")
    real_root.mkcg("burstable/pod-f")
    third = _tick(rt)
    assert set(third) == {"pod-a", "besteffort/pod-b", "pod-e", "burstable/pod-f"}

    _rmcg(real_root, "pod-e")
    assert set(_tick(rt)) == {"pod-a", "besteffort/pod-b", "burstable/pod-f"}
    real_root.mkcg("pod-e")  # the same name made again: a new workload, first sighting again
    again = _tick(rt)
    assert set(again) == {"pod-a", "besteffort/pod-b", "pod-e", "burstable/pod-f"}
    assert again["pod-e"].usage.milli_cpu is None


def test_an_unchanged_listing_gives_the_same_workloads_with_fresh_usage(real_root: RealRoot,
                                                                        rt: Runtime) -> None:
    real_root.mkcg("pod-a")
    real_root.spawn("pod-a", ["sleep", "60"])
    scanner = rt.sources.scanner
    assert scanner is not None
    one, two = scanner.scan(), scanner.scan()
    assert one == two and one is not two  # a list of its own for each caller
    assert [w.usage.milli_cpu for w in _tick(rt).values()] == [None]
    assert [w.usage.milli_cpu is not None for w in _tick(rt).values()] == [True]
