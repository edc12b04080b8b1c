"""BE egress control with real packets, the agent's own pieces in a closed loop: two namespaces joined by a
veth pair, iperf3 flows and pings through the HTB tree, and `case`, which runs the phases bench/network.py
describes and returns their figures (bench/network.py prints them; tests/network/test_net_traffic.py holds
them to the acceptance bounds)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import time
from typing import Any

from agent.config.network import NetworkConfig
from agent.executors.htb import EgressShaper
from agent.published import ActionRecord, Outcome
from kit.bench import Unmeasurable
from kit.snapshot import node_snapshot
from qos.actions import SetBeEgressCeiling, SetBeEgressSources
from qos.model import NodeSnapshot, Resources
from qos.network import NetworkPolicy, NetworkPolicyConfig

HP4, BE4, FAR4 = "198.18.0.1", "198.18.0.2", "198.18.0.100"
MBIT = 1_000_000


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> str:
    """Run `cmd`; its output, or RuntimeError with its exit status and stderr when it failed (and `check`)."""
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: rc={r.returncode} {r.stderr.strip()}")
    return r.stdout


class Topology:
    """node ns (egress `dev`: HP 198.18.0.1, BE 198.18.0.2) — veth — peer ns (198.18.0.100)."""

    def __init__(self) -> None:
        sfx = str(os.getpid())
        self.node, self.peer, self.dev = f"c14bn-{sfx}", f"c14bp-{sfx}", "c14b0"

    def up(self) -> None:
        sh("ip", "netns", "add", self.node)
        sh("ip", "netns", "add", self.peer)
        sh("ip", "link", "add", self.dev, "netns", self.node, "type", "veth", "peer", "name", "p0", "netns",
           self.peer)
        for ns in (self.node, self.peer):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for a in (HP4, BE4):
            sh("ip", "-n", self.node, "addr", "add", f"{a}/24", "dev", self.dev)
        sh("ip", "-n", self.peer, "addr", "add", f"{FAR4}/24", "dev", "p0")
        sh("ip", "-n", self.node, "link", "set", self.dev, "up")
        sh("ip", "-n", self.peer, "link", "set", "p0", "up")
        sh("ip", "netns", "exec", self.node, "ping", "-c", "2", "-i", "0.2", "-I", HP4, FAR4, check=False)

    def down(self) -> None:
        for ns in (self.node, self.peer):
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            sh("ip", "netns", "del", ns, check=False)


async def iperf(t: Topology, src: str, port: int, secs: float, delay: float = 0.0) -> float:
    """One bounded TCP flow; the receiver's goodput (bits/s), 0 when it failed."""
    await asyncio.sleep(delay)
    srv = await asyncio.create_subprocess_exec(
        "timeout", str(secs + 15), "ip", "netns", "exec", t.peer, "iperf3", "-s", "-1", "-p", str(port),
        "-B", FAR4, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(0.3)
    cli = await asyncio.create_subprocess_exec(
        "timeout", str(secs + 10), "ip", "netns", "exec", t.node, "iperf3", "-c", FAR4, "-p", str(port),
        "-B", src, "-t", str(secs), "-J", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out, _ = await cli.communicate()
    await srv.wait()
    try:
        return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError, TypeError):
        return 0.0


async def ping_p99(t: Topology, count: int, what: str, delay: float = 0.0) -> float:
    await asyncio.sleep(delay)
    p = await asyncio.create_subprocess_exec(
        "timeout", str(count * 0.01 + 20), "ip", "netns", "exec", t.node, "ping", "-n", "-i", "0.01", "-c",
        str(count), "-s", "64", "-I", HP4, FAR4, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await p.communicate()
    rtts = sorted(float(x) for x in re.findall(r"time=([\d.]+) ms", out.decode()))
    if not rtts:
        raise Unmeasurable(f"HP ping p99 {what}: no reply to {count} pings {HP4} -> {FAR4} (ping exit "
                           f"{p.returncode}: {err.decode(errors='replace').strip()[-300:]})")
    return rtts[min(len(rtts) - 1, round(0.99 * (len(rtts) - 1)))]


def snapshot(sample: Any, interval: float) -> NodeSnapshot:
    return node_snapshot(taken_at=time.time(), capacity=Resources(), cpus=(), interval_s=interval,
                         network=sample)


class Loop:
    """The agent's tick for the network policy alone: sample → decide → submit, every `interval`."""

    def __init__(self, shaper: EgressShaper, policy: NetworkPolicy, interval: float, t0: float) -> None:
        self.shaper, self.policy, self.interval, self.t0 = shaper, policy, interval, t0
        self.state = policy.initial_state()
        self.applied: list[tuple[float, int]] = []  # (t, ceiling) of each ceiling change

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            snap = snapshot(self.shaper.sample(frozenset({BE4})), self.interval)
            actions, self.state = self.policy.decide(snap, self.state)
            for a in actions:
                if isinstance(a, SetBeEgressCeiling):
                    self.applied.append((time.monotonic() - self.t0, a.ceil_bps))
                if isinstance(a, SetBeEgressCeiling | SetBeEgressSources):
                    self.shaper.submit(a, False, _record)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)


def _record(policy: str, kind: str, target: str, outcome: Outcome, reason: str,
            numbers: Any = None) -> ActionRecord:
    return ActionRecord(time.time(), policy, kind, target, outcome, reason, dict(numbers or {}))


def windowed(shaper: EgressShaper, t0: float, window: float = 0.3) -> list[tuple[float, float, float]]:
    """(t, hp_bps, be_bps) over trailing windows, from the shaper's readings."""
    rows = [r for r in shaper._hist if r.root.kind == "ours"]
    out, j = [], 0
    for r in rows:
        while rows[j].at < r.at - window:
            j += 1
        base = rows[j]
        if r.at > base.at:
            dt = r.at - base.at
            hp, be = 8 * (r.hp_bytes - base.hp_bytes) / dt, 8 * (r.be_bytes - base.be_bytes) / dt
            out.append((r.at - t0, hp, be))
    return out


def rates_between(shaper: EgressShaper, t0: float, a: float, b: float) -> tuple[float, float] | None:
    """HP's and BE's mean rate (bits/s) from the class byte counters between the first and the last reading
    in [a, b] (seconds after t0); None when fewer than two readings, 0.3 s apart at least, fall in it (the
    shaper reads every 0.1 s, but a loaded machine leaves gaps of a second)."""
    rows = [r for r in shaper._hist if r.root.kind == "ours" and a <= r.at - t0 <= b]
    if len(rows) < 2 or rows[-1].at - rows[0].at < 0.3:
        return None
    dt = rows[-1].at - rows[0].at
    return 8 * (rows[-1].hp_bytes - rows[0].hp_bytes) / dt, 8 * (rows[-1].be_bytes - rows[0].be_bytes) / dt


def readings_at(shaper: EgressShaper, t0: float) -> str:
    """When the shaper read its counters (seconds after t0), for a message."""
    return ", ".join(f"{r.at - t0:.1f}" for r in shaper._hist if r.root.kind == "ours")


async def set_sources(shaper: EgressShaper, addresses: set[str]) -> None:
    """The BE filters, under the shaper's lock as its own actions take it: its reader dumps over the same
    netlink socket every 0.1 s, and a second dump while one runs fails (EBUSY)."""
    async with shaper._lock:
        await shaper.set_sources(frozenset(addresses))


async def case(t: Topology, link_mbit: float, phase: float, interval: float) -> dict[str, Any]:
    cfg = NetworkConfig(enabled=True, device=t.dev, netns=t.node, link_mbit=link_mbit, leaf="fq_codel",
                        poll_s=0.1, policy=NetworkPolicyConfig(hold_s=interval))
    link = cfg.link_bps
    shaper = EgressShaper(cfg, window_s=interval)
    stop = asyncio.Event()
    runner = asyncio.create_task(shaper.run(stop))
    try:
        while not shaper.owned:
            await asyncio.sleep(0.05)
            if runner.done():
                raise RuntimeError(f"egress shaper stopped: {shaper.last_error}")
        await set_sources(shaper, {BE4})
        t0 = time.monotonic()
        loop = Loop(shaper, NetworkPolicy(cfg.policy), interval, t0)
        ticks_stop = asyncio.Event()
        ticking = asyncio.create_task(loop.run(ticks_stop))
        be = asyncio.create_task(iperf(t, BE4, 5202, 2 * phase + 1))
        hp = asyncio.create_task(iperf(t, HP4, 5201, phase, delay=0.5))
        hp_gp = await hp
        hp_end = time.monotonic() - t0
        be_gp = await be
        for who, goodput in (("HP", hp_gp), ("BE", be_gp)):
            if not goodput > 0:
                raise Unmeasurable(f"the {who} iperf3 flow moved nothing (iperf3 failed in the namespaces)")
        end = time.monotonic() - t0
        rows = windowed(shaper, t0)
        # the phases' second halves; on a loaded machine, what readings there are after the flows ramped up
        both = (rates_between(shaper, t0, hp_end - phase / 2, hp_end - 0.3)
                or rates_between(shaper, t0, hp_end - phase + 1.0, hp_end - 0.3))
        alone = (rates_between(shaper, t0, end - phase / 2, end - 0.5)
                 or rates_between(shaper, t0, hp_end + 2 * interval, end))
        for what, got, span in (("both flows saturating", both, (hp_end - phase + 1.0, hp_end - 0.3)),
                                ("HP idle", alone, (hp_end + 2 * interval, end))):
            if got is None:
                raise Unmeasurable(f"the shares with {what}: the shaper read the class counters too seldom "
                                   f"in {span[0]:.1f}..{span[1]:.1f} s (read at {readings_at(shaper, t0)})")
        assert both is not None and alone is not None
        (hp_both, be_both), (_, be_alone) = both, alone
        high = link * cfg.policy.high_share_percent / 100
        change = next((ts for ts, c in loop.applied if ts > hp_end and c >= high * 0.99), None)
        if change is None:
            early = next((ts for ts, c in loop.applied if ts <= hp_end and c >= high * 0.99), None)
            why = (f"it was raised already at {early:.1f} s, before HP stopped at {hp_end:.1f} s (HP's "
                   f"goodput {hp_gp / MBIT:.1f} Mbit/s: HP did not hold the link)" if early is not None
                   else f"it was never raised after HP stopped at {hp_end:.1f} s (changes: {loop.applied})")
            raise Unmeasurable(f"ceiling_change_s: no BE ceiling raise to time: {why}")
        reach = next((ts for ts, _, b in rows if ts > hp_end and b >= 0.9 * high), None)
        # latency: idle, BE flood with the agent, BE flood without the BE filter (one class, as without agent)
        idle = await ping_p99(t, 300, "on the idle link")
        with_agent = (await asyncio.gather(iperf(t, BE4, 5203, 5),
                                           ping_p99(t, 300, "under a BE flood, agent on", delay=1.5)))[1]
        ticks_stop.set()  # the loop would put the BE filter back
        await ticking
        await set_sources(shaper, set())
        without = (await asyncio.gather(iperf(t, BE4, 5204, 5),
                                        ping_p99(t, 300, "under a BE flood, BE unclassified", delay=1.5)))[1]
        series = {"HP Mbit/s": [(ts, h / MBIT) for ts, h, _ in rows],
                  "BE Mbit/s": [(ts, b / MBIT) for ts, _, b in rows],
                  "BE ceiling Mbit/s": [(ts, c / MBIT) for ts, c in loop.applied]}
        return {
            "link_mbit": link_mbit,
            "hp_share_of_link": round(hp_both / link, 3),
            "be_share_both_saturating": round(be_both / link, 3),
            "be_share_when_hp_idle": round(be_alone / link, 3),
            "ceiling_change_s": round(change - hp_end, 3),
            "be_reaches_90pct_of_high_s": round(reach - hp_end, 3) if reach is not None else None,
            "hp_goodput_mbit": round(hp_gp / MBIT, 1), "be_goodput_mbit": round(be_gp / MBIT, 1),
            "hp_ping_p99_ms_idle": idle, "hp_ping_p99_ms_be_flood_with_agent": with_agent,
            "hp_ping_p99_ms_be_flood_without_agent": without,
            "leaf": shaper.leaf.split(" (")[0], "interval_s": interval,
            "_series": series,
        }
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner, 15)
