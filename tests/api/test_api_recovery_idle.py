"""A recovered node's Watch stream is kept while messages come (bookmarks count) and cut, then resumed,
after `watch_idle_s` to 1.5 x `watch_idle_s` without one; never before `watch_idle_s`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kit.api import short_dir
from servekit import snap, workload

from agent.api.server import start_api_server
from agent.config.api import ApiConfig
from agent.recovery import NodeState, Recovery, RecoveryConfig, SchedulerState
from agent.state import Ledger, LedgerConfig
from qos.model import Resources

IDLE_S = 1.0


async def _agent(d: Path, name: str, bookmark_s: float) -> tuple[Ledger, object]:
    led = Ledger.open(LedgerConfig(node_id=name, state_path=str(d / f"{name}.json")))
    led.sync(snap([workload(1, 1)]), Resources(2000, 4 << 30), time.time())
    server = await start_api_server(led, ApiConfig(socket_path=str(d / f"{name}.sock"),
                                                   bookmark_interval_s=bookmark_s))
    return led, server


async def test_a_silent_stream_is_cut_after_watch_idle_s_and_a_bookmarked_one_is_kept() -> None:
    with short_dir() as d:
        agents = [await _agent(d, "chatty", 0.2), await _agent(d, "silent", 30.0)]
        chatty, silent = (str(d / f"{n}.admin.sock") for n in ("chatty", "silent"))
        rec = Recovery([chatty, silent], RecoveryConfig(epoch=3, watch_idle_s=IDLE_S, retry_initial_s=0.01))
        await rec.start()
        try:
            assert await rec.wait_running() is SchedulerState.RUNNING
            nodes = rec.cluster.nodes
            acked = {a: nodes[a].recovered_at for a in (chatty, silent)}
            assert all(nodes[a].recoveries == 1 for a in (chatty, silent))
            # Each new Watch ends its initial list with INITIAL_SYNC_END, acknowledged again: `recoveries`
            # counts the streams. None of them is cut before IDLE_S without a message.
            await asyncio.sleep(max(0.0, min(acked.values()) + 0.3 * IDLE_S - rec.elapsed()))
            assert nodes[silent].recoveries == 1
            assert await rec.wait_for(lambda c: c.nodes[silent].recoveries >= 2, 10 * IDLE_S)
            cut_after = rec.elapsed() - acked[silent]
            assert cut_after >= IDLE_S, cut_after
            assert nodes[silent].state is NodeState.RECOVERED
            # The bookmarked stream is kept over the same time and longer.
            await asyncio.sleep(max(0.0, acked[chatty] + 2 * IDLE_S - rec.elapsed()))
            assert nodes[chatty].recoveries == 1 and nodes[chatty].state is NodeState.RECOVERED
        finally:
            await rec.stop()
            for led, srv in agents:
                await srv.stop(0)  # type: ignore[attr-defined]
                await led.close()
