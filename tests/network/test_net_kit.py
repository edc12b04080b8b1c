"""The test kit's topology is ready for traffic the moment it is handed over: a burst sent at once, from an HP
and from a BE address, v4 and v6, arrives whole at the peer. On a veth pair just brought up the far end's
IPv6 may not answer the first neighbour solicitation for up to a second, and the kernel keeps only ~200 KiB
of the packets that wait for resolution: a burst of 200 datagrams arrived as 92, which is how the cgroup_skb
test once saw the BE class "not move" for its IPv6 destination."""

from __future__ import annotations

import sys
import time

import pytest
from kit.egress import sh
from net14kit import BE4, BE6, FAR4, FAR6, HP4, HP6, SENDER, Topo, topology

pytestmark = [pytest.mark.xdist_group("net")]

def no_port_datagrams(t: Topo, v6: bool) -> int:
    """Datagrams the peer received for a closed UDP port (port 9 has no listener there)."""
    if v6:
        text = sh("ip", "netns", "exec", t.peer, "cat", "/proc/net/snmp6")
        return int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("Udp6NoPorts")))
    text = sh("ip", "netns", "exec", t.peer, "cat", "/proc/net/snmp")
    names, values = (ln.split() for ln in text.splitlines() if ln.startswith("Udp:"))
    return int(values[names.index("NoPorts")])


def test_a_burst_sent_as_soon_as_the_topology_is_up_arrives_whole() -> None:
    with topology() as t:
        for src, dst in ((HP6, FAR6), (BE6, FAR6), (HP4, FAR4), (BE4, FAR4)):
            v6 = ":" in dst
            before = no_port_datagrams(t, v6)
            t.run(sys.executable, "-c", SENDER, dst, src)
            deadline = time.monotonic() + 10
            while (got := no_port_datagrams(t, v6) - before) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got == 200, f"{src} -> {dst}: {got} of 200 datagrams arrived"
