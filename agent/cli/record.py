"""`coloc-agent record --minutes N` (or `--stop`): record the agent's trace for a while, over its admin
socket.

The trace goes to the agent's `trace.dir` (docs/replay.md); `coloc-agent replay` reads it. A trace the
agent's config turns on (`trace.enabled`) records all the time and is not stopped by this.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TextIO

from agent.api.client import AgentCallError, AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.config.api import DEFAULT_ADMIN_SOCKET

MAX_MINUTES = 7 * 24 * 60


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="coloc-agent record", description=(__doc__ or "").split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--minutes", type=float, help=f"record for this long from now (at most {MAX_MINUTES})")
    what.add_argument("--stop", action="store_true", help="stop recording now")
    p.add_argument("--socket", default=DEFAULT_ADMIN_SOCKET,
                   help=f"the agent's admin socket, unix:PATH or host:port (default {DEFAULT_ADMIN_SOCKET})")
    args = p.parse_args(argv)
    if args.minutes is not None and not 0 < args.minutes <= MAX_MINUTES:
        p.error(f"--minutes: must be in (0, {MAX_MINUTES}], got {args.minutes:g}")
    return args


def describe(r: pb.RecordResponse) -> str:
    if not r.recording:
        return f"not recording (trace files in {r.dir})"
    until = ("until the agent's config turns it off (trace.enabled)" if not r.until_unix_ms else
             "until " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(r.until_unix_ms / 1000)))
    dropped = f", {r.dropped} dropped" if r.dropped else ""
    return f"recording the trace in {r.dir} {until} ({r.ticks} ticks so far{dropped})"


async def run(args: argparse.Namespace, out: TextIO) -> int:
    seconds = 0 if args.stop else max(1, round(args.minutes * 60))
    async with AgentClient(args.socket) as c:
        resp = await c.record(seconds)
    print(describe(resp), file=out)
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args, sys.stdout))
    except AgentCallError as err:
        print(f"coloc-agent record: {err}", file=sys.stderr)
        return 2 if err.code.name == "INVALID_ARGUMENT" else 1
