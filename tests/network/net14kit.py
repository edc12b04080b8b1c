"""Two network namespaces joined by a veth pair, made by the test and removed afterwards (also on failure).

    node ns (egress device <dev>: 198.18.0.1 HP, 198.18.0.2 BE, 2001:db8:14::1 HP, 2001:db8:14::2 BE)
    peer ns (198.18.0.100, 2001:db8:14::100): iperf3 servers and ping targets live here

Names carry the pid and a counter, so parallel test processes never share a namespace. Everything runs
through the real `ip`, `tc`, `iperf3` and `ping`; each process is bounded by `timeout`.

The neighbours are pinned (permanent entries, both ways) before any test traffic: no ARP or neighbour
discovery ever runs during a test. On a veth pair just brought up, the far end's IPv6 is not ready for up
to a second (link-ready comes through the kernel's rate-limited linkwatch), so the first neighbour
solicitation can go unanswered; the kernel asks again only after its 1 s retransmit timer, and meanwhile
keeps about 200 KiB of the packets waiting for the address and drops the rest (`unres_qlen_bytes`): a
test's burst of 200 datagrams then arrived as 92. A warm-up ping hid this only where `ping` was installed.
And a neighbour probe sent from a BE address is classified BE itself, so it can wait behind a saturated
BE class.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from kit.egress import BE4, FAR4, HP4, sh

HP6, BE6, FAR6 = "2001:db8:14::1", "2001:db8:14::2", "2001:db8:14::100"  # IPv4: kit.egress's
_seq = itertools.count()
# A burst of 200 UDP datagrams of 1,000 bytes to port 9 (no listener) of argv[1], from argv[2]:
# `python -c SENDER <dst> <src>` in the node namespace.
SENDER = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.bind((sys.argv[2], 0))
for _ in range(200):
    s.sendto(b"x" * 1000, (sys.argv[1], 9))
"""


@dataclass(frozen=True)
class Topo:
    node: str
    peer: str
    dev: str

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> str:
        return sh("ip", "netns", "exec", self.node, *cmd, check=check, timeout=timeout)

    def tc(self, *args: str, check: bool = True) -> str:
        return self.run("tc", *args, check=check)

    def root_qdisc(self) -> str:
        lines = self.tc("qdisc", "show", "dev", self.dev).splitlines()
        return next((ln for ln in lines if " root " in ln), "")

    def filter_sources(self) -> set[str]:
        """The source addresses our u32 filters match, read with the tc CLI (not the agent's decoder)."""
        out = self.tc("filter", "show", "dev", self.dev, "parent", "c01c:")
        found: set[str] = set()
        for entry in re.split(r"\n(?=filter )", out):
            keys = re.findall(r"match ([0-9a-f]{8})/ffffffff at (\d+)", entry)
            words = {int(off): val for val, off in keys}
            if set(words) == {12}:
                found.add(str(ipaddress.IPv4Address(bytes.fromhex(words[12]))))
            elif set(words) == {8, 12, 16, 20}:
                raw = bytes.fromhex("".join(words[o] for o in (8, 12, 16, 20)))
                found.add(str(ipaddress.IPv6Address(raw)))
        return found

    def class_packets(self) -> dict[str, int]:
        out = self.tc("-s", "class", "show", "dev", self.dev)
        got: dict[str, int] = {}
        for m in re.finditer(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes (\d+) pkt", out):
            got[m.group(1)] = int(m.group(3))
        return got

    def ping(self, src: str, dst: str, count: int = 20, size: int = 200,
             interval: str = "0.01") -> list[float]:
        out = sh("timeout", "30", "ip", "netns", "exec", self.node, "ping", "-q" if count > 500 else "-n",
                 "-i", interval, "-c", str(count), "-s", str(size), "-I", src, dst, check=False, timeout=40)
        return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def _up(t: Topo) -> None:
    sh("ip", "netns", "add", t.node)
    sh("ip", "netns", "add", t.peer)
    sh("ip", "link", "add", t.dev, "netns", t.node, "type", "veth", "peer", "name", "p0", "netns", t.peer)
    for ns in (t.node, t.peer):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    for a in (f"{HP4}/24", f"{BE4}/24"):
        sh("ip", "-n", t.node, "addr", "add", a, "dev", t.dev)
    for a in (f"{HP6}/64", f"{BE6}/64"):
        sh("ip", "-n", t.node, "addr", "add", a, "dev", t.dev, "nodad")
    sh("ip", "-n", t.peer, "addr", "add", f"{FAR4}/24", "dev", "p0")
    sh("ip", "-n", t.peer, "addr", "add", f"{FAR6}/64", "dev", "p0", "nodad")
    sh("ip", "-n", t.node, "link", "set", t.dev, "up")
    sh("ip", "-n", t.peer, "link", "set", "p0", "up")
    _pin_neighbours(t)


def _mac(ns: str, dev: str) -> str:
    return str(json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", dev))[0]["address"])


def _pin_neighbours(t: Topo) -> None:
    """Permanent neighbour entries both ways, so no test packet ever waits for (or is lost to) resolution."""
    node_mac, peer_mac = _mac(t.node, t.dev), _mac(t.peer, "p0")
    for far in (FAR4, FAR6):
        sh("ip", "-n", t.node, "neigh", "replace", far, "lladdr", peer_mac, "dev", t.dev, "nud", "permanent")
    for near in (HP4, BE4, HP6, BE6):
        sh("ip", "-n", t.peer, "neigh", "replace", near, "lladdr", node_mac, "dev", "p0", "nud", "permanent")


def _down(t: Topo) -> None:
    for ns in (t.node, t.peer):
        pids = sh("ip", "netns", "pids", ns, check=False).split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        sh("ip", "netns", "del", ns, check=False)


@contextmanager
def topology() -> Iterator[Topo]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root with ip and tc")
    n = next(_seq)
    sfx = f"{os.getpid()}x{n}"
    t = Topo(node=f"c14n-{sfx}", peer=f"c14p-{sfx}", dev=f"c14{n}")
    try:
        _up(t)
        yield t
    finally:
        _down(t)
        left = [ns for ns in sh("ip", "netns", "list", check=False).split() if ns in (t.node, t.peer)]
        assert not left, f"namespaces left behind: {left}"


def iperf_json(text: str) -> dict[str, object]:
    return json.loads(text) if text.strip().startswith("{") else {"error": text[-300:]}
