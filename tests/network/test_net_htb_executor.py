"""The HTB executor (`agent.executors.htb`) against a real veth in namespaces the test makes: BE filters
added and removed as BE pods come and go (checked by dumping the kernel's filters with the tc CLI, and with
real packets), a foreign root qdisc left alone, ownership lost when another component replaces our root,
clean removal, and YARN classified by cgroup (a cgroup_skb BPF program on a real cgroup2 directory)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from kit.poll import until
from kit.realcg import RealRoot
from kit.snapshot import workload
from net14kit import BE4, BE6, FAR4, FAR6, HP4, HP6, SENDER, Topo, topology

from agent.config.network import NetworkConfig
from agent.executors.cgroup_skb import CgroupPriority, ours_attached
from agent.executors.htb import EgressShaper, be_addresses
from agent.published import ActionRecord, Outcome
from agent.sources.result import PodInfo
from qos.actions import SetBeEgressCeiling, SetBeEgressSources
from qos.model import Resources

pytestmark = [pytest.mark.xdist_group("net")]
MBIT = 1_000_000


def config(t: Topo, **kw: Any) -> NetworkConfig:
    base: dict[str, Any] = {"enabled": True, "device": t.dev, "netns": t.node, "link_mbit": 100.0,
                            "leaf": "none", "remove_on_exit": True}
    return NetworkConfig(**{**base, **kw})


def recorder(into: list[ActionRecord]) -> Any:
    def record(policy: str, kind: str, target: str, outcome: Outcome, reason: str,
               numbers: Any = None) -> ActionRecord:
        rec = ActionRecord(time.time(), policy, kind, target, outcome, reason, dict(numbers or {}))
        into.append(rec)
        return rec
    return record


async def wait_tasks(shaper: EgressShaper) -> None:
    await shaper.drain()


def test_filters_follow_be_pods_v4_and_v6() -> None:
    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t), window_s=1.0)
        await shaper.open()
        try:
            first = await shaper.reconcile()
            assert first.root.kind == "ours" and shaper.owned
            assert "htb c01c:" in t.root_qdisc()
            records: list[ActionRecord] = []
            rec = shaper.submit(SetBeEgressSources(frozenset({BE4, BE6, "198.18.0.77"}), "pods came"), False,
                                recorder(records))
            assert rec.outcome == Outcome.STARTED
            await wait_tasks(shaper)
            assert t.filter_sources() == {BE4, BE6, "198.18.0.77"}
            assert (await shaper.reconcile()).classified == {BE4, BE6, "198.18.0.77"}
            shaper.submit(SetBeEgressSources(frozenset({BE4, BE6}), "pod .77 went"), False, recorder(records))
            await wait_tasks(shaper)
            assert t.filter_sources() == {BE4, BE6}  # only .77's filter went (no flush of its siblings)
            # real packets: BE sources land in c01c:20, HP sources in the default c01c:10
            for src, dst, cls in ((BE4, FAR4, "c01c:20"), (HP4, FAR4, "c01c:10"), (BE6, FAR6, "c01c:20"),
                                  (HP6, FAR6, "c01c:10")):
                before = t.class_packets()
                assert len(t.ping(src, dst, count=20)) >= 19
                after = t.class_packets()
                other = "c01c:10" if cls == "c01c:20" else "c01c:20"
                assert after[cls] - before[cls] >= 20, (src, before, after)
                # a few non-IP or host packets (ARP, ND, MLD) may pass meanwhile, never the 20 pings
                assert after[other] - before[other] <= 5, (src, before, after)
            shaper.submit(SetBeEgressSources(frozenset(), "no BE pod left"), False, recorder(records))
            await wait_tasks(shaper)
            assert t.filter_sources() == set()
        finally:
            assert await shaper.remove()
            await shaper.close()
        assert "htb" not in t.root_qdisc()

    with topology() as t:
        asyncio.run(go(t))


def test_ceiling_changes_in_place_and_counters_survive() -> None:
    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t), window_s=1.0)
        await shaper.open()
        try:
            await shaper.reconcile()
            t.ping(HP4, FAR4, count=10)
            before = await shaper.reconcile()
            shaper.submit(SetBeEgressCeiling(40 * MBIT, 10 * MBIT, "HP idle"), False, recorder([]))
            await wait_tasks(shaper)
            after = await shaper.reconcile()
            assert after.be_ceil_bps == 40 * MBIT and after.be_rate_bps == 10 * MBIT
            assert after.hp_bytes >= before.hp_bytes > 0  # change-class kept the byte counters
            assert shaper.ceiling_changes == 1
            sample = shaper.sample(frozenset())
            assert sample.owned and sample.be_ceil_bps == 40 * MBIT and sample.hp_bps is not None
            assert "rate 10Mbit ceil 40Mbit" in t.tc("class", "show", "dev", t.dev, "classid", "c01c:20")
        finally:
            await shaper.remove()
            await shaper.close()

    with topology() as t:
        asyncio.run(go(t))


def test_foreign_root_is_reported_and_never_clobbered() -> None:
    async def go(t: Topo) -> None:
        t.tc("qdisc", "add", "dev", t.dev, "root", "handle", "5:", "tbf", "rate", "1gbit", "burst", "64k",
             "latency", "50ms")
        shaper = EgressShaper(config(t), window_s=1.0)
        await shaper.open()
        try:
            reading = await shaper.reconcile()
            assert reading.root.kind == "foreign" and not shaper.owned
            assert "tbf 5:" in t.root_qdisc()
            sample = shaper.sample(frozenset({BE4}))
            assert not sample.owned and "tbf" in sample.root
            shaper.submit(SetBeEgressSources(frozenset({BE4}), "x"), False, recorder([]))
            await wait_tasks(shaper)
            assert not await shaper.remove()
            assert "tbf 5:" in t.root_qdisc()  # neither shaped nor deleted
        finally:
            await shaper.close()
        # own_device: replaced atomically, and removal afterwards restores the kernel default
        owner = EgressShaper(config(t, own_device=True), window_s=1.0)
        await owner.open()
        try:
            assert (await owner.reconcile()).root.kind == "ours"
            assert "htb c01c:" in t.root_qdisc()
        finally:
            assert await owner.remove()
            await owner.close()
        assert "tbf" not in t.root_qdisc() and "htb" not in t.root_qdisc()

    with topology() as t:
        asyncio.run(go(t))


def test_our_root_replaced_behind_our_back_loses_ownership() -> None:
    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t), window_s=1.0)
        await shaper.open()
        try:
            await shaper.reconcile()
            assert shaper.owned
            t.tc("qdisc", "replace", "dev", t.dev, "root", "handle", "9:", "pfifo")
            reading = await shaper.reconcile()
            assert reading.root.kind == "foreign" and not shaper.owned
            assert not await shaper.remove()
            assert "pfifo 9:" in t.root_qdisc()
        finally:
            await shaper.close()

    with topology() as t:
        asyncio.run(go(t))


def test_run_builds_then_removes_on_stop_and_a_missing_class_is_re_added() -> None:
    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t, poll_s=0.05), window_s=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(shaper.run(stop))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if shaper.owned:
                break
        assert shaper.owned and "htb c01c:" in t.root_qdisc()
        t.tc("class", "del", "dev", t.dev, "classid", "c01c:20")
        assert await until(lambda: "c01c:20" in t.tc("class", "show", "dev", t.dev), 3)
        stop.set()
        await asyncio.wait_for(task, 10)
        assert "htb" not in t.root_qdisc()

    with topology() as t:
        asyncio.run(go(t))


def test_missing_device_is_a_clear_error() -> None:
    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t, device="nosuch0"), window_s=1.0)
        with pytest.raises(LookupError, match=r"network\.device: no interface 'nosuch0'"):
            await shaper.open()

    with topology() as t:
        asyncio.run(go(t))


def test_be_addresses_skip_host_network_and_hp_pods() -> None:
    def pod(key: str, ips: tuple[str, ...], host: bool = False) -> PodInfo:
        return PodInfo(uid=key, namespace="ns", name=key, phase="Running", qos_class="BestEffort",
                       koord_qos=None, priority_class="", host_network=host, pod_ips=ips, container_ids=(),
                       labels={}, batch_requests=Resources(), limits=Resources())

    pods = {"k8s/a": pod("a", ("10.0.0.2", "fd00::2")), "k8s/b": pod("b", ("192.168.1.5",), host=True),
            "k8s/c": pod("c", ("10.0.0.3",))}
    got = be_addresses((workload("k8s/a"), workload("k8s/b"), workload("k8s/c", be=False)), pods)
    assert got == {"10.0.0.2", "fd00::2"}


async def sent(t: Topo, cls: str, base: dict[str, int], want: int, within_s: float = 10.0) -> dict[str, int]:
    """The class counters once `cls` has sent `want` packets more than in `base`, or at `within_s`: a packet
    the sender handed over may still wait in its class's queue (BE's 10 Mbit/s) when the sender exits."""
    deadline = time.monotonic() + within_s
    while (now := t.class_packets())[cls] - base[cls] < want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return now


@pytest.mark.cgroups
def test_yarn_classified_by_cgroup_with_a_cgroup_skb_program(real_root: RealRoot) -> None:
    """A process in the (real, cgroup2) YARN directory sends from the HP/host address: its packets go to BE;
    the same sender outside it stays HP. Needs the cgroup2 mount (the `unified` one on this hybrid host)."""
    if real_root.hierarchy.unified is None:
        pytest.skip("no cgroup2 mount")
    real_root.mkcg("hadoop-yarn/container_1")

    async def go(t: Topo) -> None:
        shaper = EgressShaper(config(t, yarn_cgroup2=f"{real_root.name}/hadoop-yarn"), window_s=1.0,
                              cgroup2_mount=real_root.hierarchy.unified)
        await shaper.open()
        try:
            await shaper.reconcile()
            assert shaper._yarn is not None, shaper._warned
            for dst, src in ((FAR4, HP4), (FAR6, HP6)):
                before = t.class_packets()
                proc = real_root.spawn("hadoop-yarn/container_1",
                                       ["nsenter", f"--net=/run/netns/{t.node}", sys.executable, "-c",
                                        SENDER, dst, src])
                assert proc.wait(timeout=30) == 0
                mid = await sent(t, "c01c:20", before, 195)
                subprocess.run(["ip", "netns", "exec", t.node, sys.executable, "-c", SENDER, dst, src],
                               check=True, timeout=30)
                after = await sent(t, "c01c:10", mid, 195)
                assert mid["c01c:20"] - before["c01c:20"] >= 195, (dst, before, mid)
                assert after["c01c:10"] - mid["c01c:10"] >= 195, (dst, mid, after)
                assert after["c01c:20"] - mid["c01c:20"] <= 2, (dst, mid, after)
        finally:
            await shaper.remove()
            await shaper.close()
        assert shaper._yarn is None

    with topology() as t:
        asyncio.run(go(t))


@pytest.mark.cgroups
def test_a_program_a_killed_run_left_is_replaced_not_piled_up(real_root: RealRoot) -> None:
    """A killed agent never detaches its cgroup_skb program (the cgroup keeps it attached after the process
    is gone): the next run's attach takes the old one off first, so one program of ours stays, not one per
    crash. Real bpf(2) on a real cgroup2 directory."""
    if real_root.hierarchy.unified is None:
        pytest.skip("no cgroup2 mount")
    real_root.mkcg("hadoop-yarn")
    path = str(real_root.hierarchy.unified / real_root.name / "hadoop-yarn")
    left = CgroupPriority(path, 0x10020)
    left._close()  # the killed run's process is gone: its fds are closed, its attachment stays
    assert ours_attached(path) == 1
    again = CgroupPriority(path, 0x10020)
    try:
        assert ours_attached(path) == 1, "a second program of ours was attached beside the old one"
    finally:
        again.detach()
    assert ours_attached(path) == 0


def test_a_tree_taken_over_from_an_earlier_run_gets_this_runs_link_rate() -> None:
    """A run killed with its tree in place (the root handle says it is ours), then started with another
    `link_mbit`: the tree is taken over with its counters, and its link and HP classes get the new link."""
    async def go(t: Topo) -> None:
        killed = EgressShaper(config(t), window_s=1.0)
        await killed.open()
        await killed.reconcile()
        t.ping(HP4, FAR4, count=10)
        await killed.close()  # never removed: it was killed
        again = EgressShaper(config(t, link_mbit=900.0), window_s=1.0)
        await again.open()
        try:
            reading = await again.reconcile()
            assert again.owned and reading.hp_bytes > 0, "not taken over with its counters"
            assert "rate 900Mbit ceil 900Mbit" in t.tc("class", "show", "dev", t.dev, "classid", "c01c:1")
            assert "ceil 900Mbit" in t.tc("class", "show", "dev", t.dev, "classid", "c01c:10")
            again.submit(SetBeEgressCeiling(500 * MBIT, 50 * MBIT, "HP idle"), False, recorder([]))
            await wait_tasks(again)
            assert (await again.reconcile()).be_ceil_bps == 500 * MBIT
        finally:
            await again.remove()
            await again.close()

    with topology() as t:
        asyncio.run(go(t))


def test_opening_the_netns_socket_never_hands_the_agent_a_sigterm() -> None:
    """pyroute2 opens a netlink socket in a namespace through a forked child, which it stops with SIGTERM.
    The child inherits the asyncio loop's signal wakeup fd: a SIGTERM that reached it before it exited was
    read by the agent's loop as the agent's own, and the agent stopped (seen in a test run: "agent stopped"
    30 ms after the fork). Real forks, a real namespace, the loop's real signal handling."""
    async def go(t: Topo) -> None:
        loop = asyncio.get_running_loop()
        got: list[int] = []
        loop.add_signal_handler(signal.SIGTERM, lambda: got.append(1))
        try:
            for _ in range(40):
                shaper = EgressShaper(config(t), window_s=1.0)
                await shaper.open()
                await shaper.close()
            await asyncio.sleep(0.2)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
        assert got == [], f"{len(got)} SIGTERMs of the netns child reached the loop"

    with topology() as t:
        asyncio.run(go(t))
