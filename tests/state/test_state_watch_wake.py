"""Watchers are woken a slice at a time: a callback that became ready when an event was emitted (the
tick loop's timer, say) runs after at most WAKE_SLICE woken watchers, not after all of them; and every
watcher still gets every event, in order."""

from __future__ import annotations

import asyncio
import time

from statekit import snapshot

from agent.state import AdmitRequest, Ledger, LedgerConfig
from agent.state.ledger import WAKE_SLICE
from qos.model import Resources, Source

WATCHERS = 10 * WAKE_SLICE


def test_a_ready_callback_is_not_queued_behind_every_watcher() -> None:
    async def run() -> tuple[list[str], list[list[int]]]:
        led = Ledger(LedgerConfig(node_id="n", state_path=None), boot_id="b")
        led.sync(snapshot([]), Resources(4000, 8 << 30), time.time())
        led.ack_recovery(1, led.revision)
        order: list[str] = []
        got: list[list[int]] = [[] for _ in range(WATCHERS)]
        subs = [led.subscribe(None) for _ in range(WATCHERS)]

        async def watcher(i: int) -> None:
            while len(got[i]) < 3:
                batch = await subs[i].next_batch(100, 5.0)
                order.append("watcher")
                got[i] += [e.revision for e in batch]

        tasks = [asyncio.create_task(watcher(i)) for i in range(WATCHERS)]
        await asyncio.sleep(0.01)  # every watcher parked in next_batch
        for i in range(3):
            led.admit(AdmitRequest(f"local/batch/a-{i}", "app", Source.LOCAL, Resources(1, 1),
                                   request_id=f"r{i}"), 1)
        asyncio.get_running_loop().call_soon(order.append, "tick")
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order, got

    order, got = asyncio.run(run())
    assert order.index("tick") <= 2 * WAKE_SLICE, order.index("tick")
    first = got[0]
    assert len(first) >= 3 and first == sorted(first) and all(g == first for g in got)
