"""What a killed agent leaves on the network, with real `coloc-agent run` processes: its HTB tree on a real
veth device in a network namespace of the test's own, and YARN's cgroup_skb program on a real cgroup2
directory. The next run, with network control off, removes both; a root qdisc that is not ours is left."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kit.agentproc import agent_config, metric, running_agent
from kit.holdings import marks, rewrite
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot
from net14kit import Topo, topology

from agent.executors.cgroup_skb import ours_attached

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.xdist_group("net")]


def test_a_tree_a_killed_agent_left_is_removed_by_a_run_with_network_control_off(
        real_root: RealRoot, tmp_path: Path) -> None:
    if real_root.hierarchy.unified is None:
        pytest.skip("no cgroup2 mount")
    real_root.mkcg("hadoop-yarn")
    yarn = real_root.hierarchy.unified / real_root.name / "hadoop-yarn"
    port = free_port()
    log = tmp_path / "agent.log"
    record = tmp_path / "state" / "state.json.held"
    with topology() as t:
        def config(enabled: bool) -> Path:
            network = {"enabled": enabled, "device": t.dev, "netns": t.node, "link_mbit": 100, "leaf": "none",
                       "yarn_cgroup2": f"{real_root.name}/hadoop-yarn"}
            return agent_config(tmp_path, f"{real_root.name}/agent", port, network=network)

        with running_agent(config(True), log) as agent:
            assert wait(lambda: "htb c01c:" in t.root_qdisc() and ours_attached(str(yarn)) == 1, 30), \
                log.read_text()[-3000:]
            assert marks(record)["egress"]["device"] == t.dev
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        assert "htb c01c:" in t.root_qdisc(), "the tree went with the agent"
        with running_agent(config(False), log) as again:
            assert wait(lambda: "htb c01c:" not in t.root_qdisc(), 30), log.read_text()[-3000:]
            assert wait(lambda: ours_attached(str(yarn)) == 0, 10)
            assert wait(lambda: "egress" not in marks(record), 10)
            assert wait(lambda: metric(port, "coloc_ticks_total") >= 1, 30)
            assert again.poll() is None
        # a root qdisc of someone else's, and a record naming its device: left as it is
        t.tc("qdisc", "replace", "dev", t.dev, "root", "handle", "9:", "pfifo")
        rewrite(record, egress={"device": t.dev, "netns": t.node, "yarn_cgroup2": ""})
        assert marks(record)["egress"]["device"] == t.dev
        with running_agent(config(False), log):
            assert wait(lambda: "egress" not in marks(record), 30), log.read_text()[-3000:]
            assert "pfifo 9:" in t.root_qdisc()


def test_the_tree_on_a_device_no_longer_configured_is_removed(real_root: RealRoot, tmp_path: Path) -> None:
    """A killed agent's tree on one device; the next run shapes another device: the old tree goes, the new
    one is built (real agents, two real namespaces with a veth each)."""
    port = free_port()
    log = tmp_path / "agent.log"
    with topology() as old, topology() as new:
        def config(t: Topo) -> Path:
            network = {"enabled": True, "device": t.dev, "netns": t.node, "link_mbit": 100, "leaf": "none"}
            return agent_config(tmp_path, f"{real_root.name}/agent", port, network=network)

        with running_agent(config(old), log) as agent:
            assert wait(lambda: "htb c01c:" in old.root_qdisc(), 30), log.read_text()[-3000:]
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        with running_agent(config(new), log) as again:
            moved = lambda: "htb c01c:" in new.root_qdisc() and "htb c01c:" not in old.root_qdisc()  # noqa: E731
            assert wait(moved, 30), log.read_text()[-3000:]
            assert again.poll() is None
