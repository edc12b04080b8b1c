"""`coloc-agent decommission [--graceful] [--timeout S] [--wait-for apps] [--wait]` and
`coloc-agent recommission`, over the agent's socket.

Without `--graceful` the node is decommissioned forcefully (its batch work is evicted now), as YARN's
`-refreshNodes` without `-g`. The operator is not a scheduler: the call is fenced with the highest epoch
the agent has seen unless `--epoch` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from typing import TextIO

from agent.api.client import AgentCallError, AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.config.api import DEFAULT_ADMIN_SOCKET

_LIFECYCLE = {v: k.removeprefix("LIFECYCLE_") for k, v in pb.Lifecycle.items()}
_PHASE = {v: k.removeprefix("DRAIN_PHASE_") for k, v in pb.DrainPhase.items()}
BAR = 30


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="coloc-agent", description="Decommission or recommission this node.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decommission", help="take the node out of service",
                       description="Take this node out of service over the agent's admin socket: new batch "
                                   "work is refused and what runs is evicted, at once or after --timeout "
                                   "(--graceful); `recommission` undoes it.")
    d.add_argument("--graceful", action="store_true",
                   help="let running batch work finish until the timeout (default: evict it now)")
    d.add_argument("--timeout", type=int, default=3600, metavar="S",
                   help="graceful: seconds to wait before evicting what is left; < 0 waits forever, 0 is now "
                        "(default 3600)")
    d.add_argument("--wait-for", choices=("allocations", "apps"), default="allocations",
                   help="apps: also wait for every application that ran here since the drain started")
    d.add_argument("--wait", action="store_true", help="show progress until the node is DECOMMISSIONED")
    d.add_argument("--reason", default="", help="free text recorded with the drain")
    r = sub.add_parser("recommission", help="return the node to service",
                       description="Return a decommissioning or decommissioned node to service over the "
                                   "agent's admin socket: batch work is admitted again.")
    for q in (d, r):
        q.add_argument("--socket", default=DEFAULT_ADMIN_SOCKET,
                       help=f"the agent's admin socket (relative or absolute), unix:PATH or host:port; "
                            f"the read socket refuses changes (default {DEFAULT_ADMIN_SOCKET})")
        q.add_argument("--epoch", type=int, default=0,
                       help="scheduler epoch for the fence (default: the highest the agent has seen)")
        q.add_argument("--request-id", default="", help="idempotency key (default: a new one)")
    return p.parse_args(argv)


def progress_line(st: pb.Status, total_s: float | None, now: float, tty: bool) -> str:
    """One line of progress: lifecycle, phase, allocations left, time left (and a bar on a terminal)."""
    drain = st.node.drain
    left = drain.allocations_left
    life = _LIFECYCLE.get(st.node.lifecycle, "?")
    if drain.has_deadline:
        remaining = max(0.0, drain.deadline_unix_ms / 1000 - now)
        time_left = f"{remaining:.0f}s left"
    else:
        remaining, time_left = None, "no deadline"
    text = f"{life} {_PHASE.get(drain.phase, '?')}: {left} allocation(s) left, {time_left}"
    if not tty:
        return text
    if total_s and remaining is not None:
        done = int(BAR * min(1.0, max(0.0, 1 - remaining / total_s)))
    else:
        done = BAR if life == "DECOMMISSIONED" else 0
    return f"[{'#' * done}{'.' * (BAR - done)}] {text}"


async def _epoch(c: AgentClient, given: int) -> int:
    if given > 0:
        return given
    st = await c.status(recent=0)
    return max(1, st.node.highest_scheduler_epoch)


async def decommission(args: argparse.Namespace, out: TextIO) -> int:
    rid = args.request_id or str(uuid.uuid4())
    async with AgentClient(args.socket) as c:
        resp = await c.drain(await _epoch(c, args.epoch), graceful=args.graceful, timeout_s=args.timeout,
                             wait_for_apps=args.wait_for == "apps", request_id=rid, reason=args.reason)
        d = resp.drain
        deadline = (time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(d.deadline_unix_ms / 1000))
                    if d.has_deadline else "none (waits forever)")
        print(f"{_LIFECYCLE.get(resp.lifecycle, '?')}: {resp.remaining_allocations} allocation(s) left, "
              f"deadline {deadline}", file=out, flush=True)
        if not args.wait:
            return 0
        return await _follow(c, d, out)


async def _follow(c: AgentClient, d: pb.DrainStatus, out: TextIO) -> int:
    tty = out.isatty()
    total = (d.deadline_unix_ms - d.started_unix_ms) / 1000 if d.has_deadline else None
    while True:
        try:
            st = await c.status(recent=0, timeout=5.0)
        except AgentCallError as err:  # the agent restarting: it resumes the drain, keep following
            print(f"\nagent not answering ({err.code.name}); retrying", file=out, flush=True)
            await asyncio.sleep(1.0)
            continue
        line = progress_line(st, total, time.time(), tty)
        print(f"\r{line}\033[K" if tty else line, end="" if tty else "\n", file=out, flush=True)
        if st.node.lifecycle == pb.LIFECYCLE_DECOMMISSIONED:
            print("" if not tty else "\n", end="", file=out, flush=True)
            return 0
        if st.node.lifecycle != pb.LIFECYCLE_DECOMMISSIONING:
            print(f"\nthe drain was cancelled: node is {_LIFECYCLE.get(st.node.lifecycle, '?')}", file=out)
            return 1
        await asyncio.sleep(1.0)


async def recommission(args: argparse.Namespace, out: TextIO) -> int:
    async with AgentClient(args.socket) as c:
        rid = args.request_id or str(uuid.uuid4())
        resp = await c.recommission(await _epoch(c, args.epoch), request_id=rid)
    print(f"{_LIFECYCLE.get(resp.lifecycle, '?')}", file=out)
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    run = decommission if args.command == "decommission" else recommission
    try:
        return asyncio.run(run(args, sys.stdout))
    except AgentCallError as err:
        print(f"coloc-agent {args.command}: {err}", file=sys.stderr)
        return 2 if err.code.name == "INVALID_ARGUMENT" else 1
    except KeyboardInterrupt:
        return 130
