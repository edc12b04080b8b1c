"""`coloc-agent recover --agents FILE|DIR`: rebuild the cluster view from every agent and print it.

Progress goes to stderr; the final view (a table, `--json`, or `--json-yunikorn`) to stdout.
`--json-yunikorn` prints one YuniKorn si message per line, `{"<SiMessageName>": {...}}`, starting with
RegisterResourceManagerRequest (docs/yunikorn.md); allocations it leaves out are named on stderr.
Exit status: 0 every node recovered, 3 running with lost nodes, 1 failed (fenced), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent import __version__
from agent.config.api import is_admin_socket
from agent.recovery.cluster import Cluster, NodeState
from agent.recovery.driver import Progress, Recovery, RecoveryConfig, SchedulerState
from agent.recovery.yunikorn import si_stream


class AgentsError(Exception):
    pass


def read_agents(spec: str) -> list[str]:
    """A file with one socket address per line (# comments), or a directory: its admin sockets
    (`admin.sock`, `*.admin.sock`: recovery acknowledges, which the read sockets refuse), or every *.sock in
    it when it has none."""
    path = Path(spec)
    if path.is_dir():
        socks = sorted(str(p) for p in path.glob("*.sock"))
        if not socks:
            raise AgentsError(f"--agents: no *.sock in directory {spec}")
        return [s for s in socks if is_admin_socket(s)] or socks
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise AgentsError(f"--agents: cannot read {spec}: {err.strerror}") from err
    out: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if any(c.isspace() for c in line):
            raise AgentsError(f"--agents: {spec}:{n}: one address per line, got {raw.strip()!r}")
        out.append(line)
    if not out:
        raise AgentsError(f"--agents: {spec} lists no agents")
    return list(dict.fromkeys(out))


def cluster_json(rec: Recovery) -> dict[str, Any]:
    cl = rec.cluster
    nodes = []
    for nc in cl.nodes.values():
        owned = sorted(k for k in nc.allocations if cl.owner.get(k) == nc.address)
        nodes.append({
            "address": nc.address, "node_id": nc.node_id, "state": nc.state.value,
            "incarnation": nc.incarnation, "boot_id": nc.identity.boot_id if nc.identity else "",
            "revision": nc.revision, "lifecycle": nc.node.lifecycle.value if nc.node else "",
            "applications": len(nc.applications), "allocations": len(owned), "allocation_keys": owned,
            "snapshots": nc.snapshots, "recoveries": nc.recoveries, "last_error": nc.last_error,
            "recovered_at_s": nc.recovered_at, "lost_at_s": nc.lost_at,
        })
    return {"scheduler_state": rec.state.value, "failure": rec.failure, "epoch": rec.cfg.epoch,
            "running_after_s": rec.running_after_s, "elapsed_s": rec.elapsed(), "totals": cl.totals(),
            "conflicts": cl.conflicts, "nodes": nodes}


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f}Gi"


def cluster_table(rec: Recovery) -> str:
    cl: Cluster = rec.cluster
    rows = [("NODE", "ADDRESS", "STATE", "LIFECYCLE", "REV", "APPS", "ALLOCS", "CPU(m)", "MEM", "NOTE")]
    for nc in sorted(cl.nodes.values(), key=lambda n: (n.node_id or "~", n.address)):
        owned = [a for k, a in nc.allocations.items() if cl.owner.get(k) == nc.address]
        known = nc.state is NodeState.RECOVERED
        rows.append((
            nc.node_id or "?", nc.address, nc.state.value, nc.node.lifecycle.value if nc.node else "-",
            str(nc.revision), str(len(nc.applications)) if known else "-", str(len(owned)) if known else "-",
            str(sum(a.resources.milli_cpu for a in owned)) if known else "-",
            _gib(sum(a.resources.memory_bytes for a in owned)) if known else "-",
            "" if known else (nc.last_error[:60] or "no answer"),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    t = cl.totals()
    lines.append(f"\nscheduler {rec.state.value}" + (f" ({rec.failure})" if rec.failure else "")
                 + f"; nodes {t['recovered']} recovered, {t['lost']} lost, {t['recovering']} recovering "
                 f"of {t['nodes']}; {t['applications']} applications, {t['allocations']} allocations, "
                 f"{t['allocated_milli_cpu']} milli-CPU, {_gib(t['allocated_memory_bytes'])}"
                 + (f"; {t['conflicts']} key conflicts" if t["conflicts"] else ""))
    return "\n".join(lines)


def _printer(quiet: bool) -> Any:
    def show(p: Progress) -> None:
        if quiet:
            return
        t = p.totals
        who = (p.node_id or p.address) if p.address else "scheduler"
        print(f"[{p.elapsed_s:7.3f}s] {who}: {p.state}{' - ' + p.detail if p.detail else ''}  "
              f"({t['recovered']} recovered, {t['lost']} lost, {t['recovering']} recovering; "
              f"{t['allocations']} allocations)", file=sys.stderr, flush=True)
    return show


async def run(addresses: list[str], cfg: RecoveryConfig, follow_s: float, quiet: bool) -> Recovery:
    rec = Recovery(addresses, cfg, on_progress=_printer(quiet))
    await rec.start()
    try:
        await rec.wait_running()
        if follow_s > 0 and rec.state is SchedulerState.RUNNING:
            await rec.wait_for(lambda c: False, follow_s)
    finally:
        await rec.stop()
    return rec


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coloc-agent recover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", required=True, metavar="FILE|DIR",
                   help="file with one agent socket address per line, or a directory of *.sock")
    p.add_argument("--epoch", type=int, default=None,
                   help="this scheduler's epoch; must exceed any earlier scheduler's (default: now in ms)")
    p.add_argument("--scheduler-id", default="coloc-recover",
                   help="this scheduler's name in the fence of each AckRecovery (default coloc-recover)")
    p.add_argument("--parallel", type=int, default=RecoveryConfig.parallel,
                   help=f"nodes in initial sync at once (default {RecoveryConfig.parallel})")
    p.add_argument("--lost-after", type=float, default=10.0, metavar="S",
                   help="declare a node lost S seconds after its first attempt (or its stream's drop) "
                        "without success; waiting for a --parallel slot does not count (default 10)")
    p.add_argument("--rpc-timeout", type=float, default=5.0, metavar="S",
                   help="seconds each call to an agent may take (default 5)")
    p.add_argument("--follow", type=float, default=0.0, metavar="S",
                   help="after Running, keep following the agents for S seconds (late nodes are recovered)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the final cluster view as JSON")
    out.add_argument("--json-yunikorn", action="store_true",
                     help="print the final view as YuniKorn si messages, one JSON object per line")
    p.add_argument("--rm-id", default="coloc", help="rmID for --json-yunikorn (default coloc)")
    p.add_argument("--policy-group", default="queues",
                   help="policyGroup for --json-yunikorn (default queues)")
    p.add_argument("--queue", default="root.default",
                   help="queue for --json-yunikorn applications without a queue tag (default root.default)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def print_yunikorn(cluster: Cluster, args: argparse.Namespace) -> None:
    """The si messages as they are made, one line each (what is held is one message, not the cluster's)."""
    def note(text: str) -> None:
        print(f"coloc-agent recover: --json-yunikorn: {text}", file=sys.stderr)

    write = sys.stdout.write
    for m in si_stream(cluster, args.rm_id, version=__version__, policy_group=args.policy_group,
                       queue=args.queue, on_note=note):
        write(json.dumps(m, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        addresses = read_agents(args.agents)
        cfg = RecoveryConfig(epoch=args.epoch if args.epoch is not None else int(time.time() * 1000),
                             scheduler_id=args.scheduler_id, parallel=args.parallel,
                             lost_after_s=args.lost_after, rpc_timeout_s=args.rpc_timeout)
    except (AgentsError, ValueError) as err:
        print(f"coloc-agent recover: {err}", file=sys.stderr)
        return 2
    rec = asyncio.run(run(addresses, cfg, args.follow, args.quiet))
    if args.json_yunikorn:
        print_yunikorn(rec.cluster, args)
    elif args.json:
        print(json.dumps(cluster_json(rec), indent=1))
    else:
        print(cluster_table(rec))
    if rec.state is SchedulerState.FAILED:
        return 1
    return 3 if rec.cluster.by_state(NodeState.LOST) else 0
