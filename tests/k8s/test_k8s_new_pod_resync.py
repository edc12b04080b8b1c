"""A pod started between two kubelet lists is noticed by its cgroup and re-listed at once.

Real cgroups (a private root laid out as the kubelet lays it out, cgroupfs driver) and the kubelet as a
local HTTP server answering `GET /pods` with a v1 PodList fixture in the kubelet's exact format (no kubelet
runs here). The source's resync clock is a hand-moved fake; everything else is real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.agentproc import kubelet_node_config, running_agent
from kit.clock import FakeClock
from kit.fakes.kubelet import FakeKubelet
from kit.poll import holds, wait
from kit.realcg import RealRoot

from agent.config.sources import KubeletConfig
from agent.daemon.source_runner import WorkloadSources, pod_cgroup_lister
from agent.sources.kubelet import KubeletSource
from cgroups.discovery import discover
from cgroups.layout import Layout
from cgroups.reader import CgroupReader

LISTED_BE = "besteffort/pod0a1b2c3d-0000-4000-8000-000000000001"  # in podlist-mixed.json
LISTED_GUARANTEED = "pod0a1b2c3d-0000-4000-8000-000000000003"
NEW_BE = "besteffort/pod0a1b2c3d-0000-4000-8000-0000000000aa"  # started after the list was taken

pytestmark = [pytest.mark.cgroups]


def _sources(url: str, clock: FakeClock, root: RealRoot) -> tuple[WorkloadSources, KubeletSource]:
    layout = Layout("cgroupfs")
    cfg = KubeletConfig(url=url, token_file="", timeout_s=0.5, resync_s=10.0, stale_after_s=30.0,
                        min_resync_gap_s=0.2)
    kubelet = KubeletSource(cfg, layout, clock=clock)
    sources = WorkloadSources(None, kubelet, None,
                              pod_cgroups=pod_cgroup_lister(CgroupReader(discover(), root.name), layout))
    return sources, kubelet


async def test_a_new_pod_cgroup_makes_the_kubelet_list_again_once(
        fixtures: Path, clock: FakeClock, real_root: RealRoot) -> None:
    yarn = "besteffort/hadoop-yarn/container_e01_1_0001_01_000001"
    for rel in (LISTED_BE, LISTED_GUARANTEED, "burstable", yarn):
        real_root.mkcg(rel)
    with FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json") as fake:
        sources, kubelet = _sources(fake.url, clock, real_root)
        await kubelet.refresh()
        sources.list()
        clock.advance(1.0)
        assert not kubelet.due(), "listed pods and YARN containers alone must not ask for a re-list"

        real_root.mkcg(NEW_BE)
        sources.list()
        assert kubelet.due(), "a pod cgroup the list does not name should make the kubelet list again"
        await kubelet.refresh()  # the fixture still leaves the new pod out (e.g. a kubelet lagging behind)

        for _ in range(3):
            sources.list()
            clock.advance(1.0)
            assert not kubelet.due(), "a pod the kubelet leaves out must not make it re-list each tick"
        assert len(fake.seen("GET", "/pods")) == 2


def test_the_agent_process_lists_again_when_a_pod_cgroup_appears(fixtures: Path, real_root: RealRoot,
                                                                tmp_path: Path) -> None:
    """The whole `coloc-agent run` process: its kubelet resync is 30 s, yet a new pod is listed at once."""
    real_root.mkcg(LISTED_BE)
    with FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json") as fake:
        config = kubelet_node_config(tmp_path, real_root.name, fake.url)
        with running_agent(config, tmp_path / "agent.log"):
            listed = wait(lambda: len(fake.seen("GET", "/pods")) >= 1, 15)
            assert listed, (tmp_path / "agent.log").read_text()
            # a few ticks with nothing new: no re-list
            assert holds(lambda: len(fake.seen("GET", "/pods")) == 1, 1.5)
            real_root.mkcg(NEW_BE)
            # >= 2: the batch limits' creation trigger (agent/daemon/batch_limits.py) lists at once too
            relisted = wait(lambda: len(fake.seen("GET", "/pods")) >= 2, 5)
            assert relisted, "the new pod was not listed early"
