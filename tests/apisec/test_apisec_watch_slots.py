"""Issue 15: watchers that never read are dropped, and their stream slots come back.

In-process ledger and API server over a real unix socket; the stuck watchers are real gRPC streams whose
client stops reading, so HTTP/2 flow control blocks the server's writes exactly as with a hung scheduler.
"""

from __future__ import annotations

import asyncio
import time

import grpc
from apiseckit import serving

from agent.api.client import AgentCallError, AgentClient, Marker
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc

LIMIT = 4
BIG = "x" * (200 << 10)  # one notice is larger than any HTTP/2 window a client grants up front


async def test_stuck_watchers_twice_the_limit_then_a_new_watcher_is_served() -> None:
    async with serving(queue=16, max_streams=LIMIT, max_concurrent_rpcs=64) as s:
        channels = [grpc.aio.insecure_channel(f"unix:{s.socket}") for _ in range(2 * LIMIT)]
        try:
            for wave in (channels[:LIMIT], channels[LIMIT:]):
                calls = [pb_grpc.NodeAgentStub(ch).Watch(pb.WatchRequest(send_initial=True)) for ch in wave]
                for call in calls:
                    await call.read()  # the initial sync; then these clients never read again
                dropped_before = s.ledger.dropped_watchers
                deadline = time.monotonic() + 20
                while s.ledger.dropped_watchers < dropped_before + LIMIT and time.monotonic() < deadline:
                    s.ledger.notice("load", BIG)
                    await asyncio.sleep(0.01)
                assert s.ledger.dropped_watchers == dropped_before + LIMIT
            assert s.ledger.dropped_watchers == 2 * LIMIT
            async with AgentClient(s.socket) as c:
                deadline = time.monotonic() + 5
                while True:
                    try:
                        stream = c.watch(send_initial=True)
                        first = await anext(stream)
                        break
                    except AgentCallError as err:
                        assert time.monotonic() < deadline, f"slots never came back: {err}"
                        await asyncio.sleep(0.1)
                assert any(isinstance(i, Marker) and i.initial_sync_end for i in first) or first
                await stream.aclose()
            assert s.server.service.streams <= 1
        finally:
            for ch in channels:
                await ch.close(None)
