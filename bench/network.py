"""BE egress control with real packets: HP and BE TCP flows through the agent's HTB tree, closed loop.

Two namespaces joined by a veth pair (made here, removed at the end, also on Ctrl-C); iperf3 servers in the
peer namespace. The link capacity is the HTB link class (`--link-mbit`, default 100: a loaded 2-core machine
does not push 400 Mbit/s through iperf3 reliably). The loop is the agent's own pieces: `EgressShaper.run`
reads the class counters every 0.1 s, each tick (`--interval`) builds the `NetworkSample`, the registered
`NetworkPolicy` decides and `EgressShaper.submit` applies. Phases, in one run:

1. HP and BE both saturating (`--phase` s): HP's share of the link and BE's, from the class byte counters
   over the phase's second half.
2. HP stops, BE goes on: BE's share once settled, and how long after HP stopped the ceiling reached the high
   share (`ceiling_change_s`, from the tick that applied it) and BE's rate reached 90 % of it.
3. Latency: HP ping p99 (10 ms × 300) on the idle link, under a BE flood with the agent (BE classified), and
   under the same flood with BE's filter removed (BE in HP's class: what the link does without the agent).

Prints one JSON line; writes bench/out/network_rates.png (both rates and the ceiling over time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

from kit.bench import Unmeasurable, finish, require_tools
from kit.egress import Topology, case

from agent.demo.plots import plot_timeseries

TOOLS = ("ip", "iperf3", "ping", "timeout")  # the programs it runs (the HTB tree is built over netlink)
# every figure the docs quote; `be_reaches_90pct_of_high_s` is null when BE did not get there in the phase
REQUIRED = ("hp_share_of_link", "be_share_both_saturating", "be_share_when_hp_idle", "ceiling_change_s",
            "hp_ping_p99_ms_idle", "hp_ping_p99_ms_be_flood_with_agent",
            "hp_ping_p99_ms_be_flood_without_agent")
OUT = Path(__file__).resolve().parent / "out"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 s phases, 0.5 s ticks")
    p.add_argument("--link-mbit", type=float, default=100.0)
    p.add_argument("--phase", type=float, default=6.0, help="seconds per phase")
    p.add_argument("--interval", type=float, default=1.0, help="the loop's tick")
    args = p.parse_args(argv)
    if args.quick:
        args.phase, args.interval = 3.0, 0.5
    require_tools("bench/network.py", TOOLS)
    if os.geteuid() != 0:
        print("bench/network.py needs root (network namespaces, tc)", file=sys.stderr)
        return 2
    load0 = os.getloadavg()[0]
    t = Topology()
    t.down()
    try:
        t.up()
        result = asyncio.run(case(t, args.link_mbit, args.phase, args.interval))
    except Unmeasurable as err:
        print(f"bench/network.py: not measured: {err}", file=sys.stderr)
        return 1
    finally:
        t.down()
    series = result.pop("_series")
    with contextlib.suppress(ValueError):
        result["plot"] = str(plot_timeseries(OUT / "network_rates.png",
                                             f"BE egress control, link {args.link_mbit:g} Mbit/s", series,
                                             "Mbit/s"))
    result["loadavg"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return finish("bench/network.py", result, REQUIRED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
