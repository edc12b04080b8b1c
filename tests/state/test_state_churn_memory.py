"""Under churn, the ledger and the node API's encodings keep what the live workloads and the event ring need,
and nothing for each workload that has gone: bench/soak.py's question (does the agent's memory stay flat?)
for these two, in a second instead of 30 minutes."""

from __future__ import annotations

import gc
import itertools
import tracemalloc
from collections import deque

from kit.clock import FakeClock
from kit.snapshot import workload
from statekit import snapshot

from agent.api.wire import Encoder
from agent.state import Ledger, LedgerConfig
from qos.model import Resources

BATCH = Resources(2000, 4 << 30)
RING = 64
LIVE = 10
MORE = 400


class Churn:
    """BE pods made one at a time (each a new name), the oldest gone past LIVE; every event encoded as a
    watcher's stream would be."""

    def __init__(self, encoder: Encoder) -> None:
        config = LedgerConfig(node_id="node-a", state_path=None, ring_size=RING, watch_queue_size=16)
        self.ledger = Ledger(config, boot_id="boot-1", clock=FakeClock())
        self.encoder = encoder
        self.live: deque[str] = deque()
        self.made = itertools.count()

    def run(self, pods: int) -> None:
        for _ in range(pods):
            n = next(self.made)
            self.live.append(f"k8s/0b6e1c9a-0000-4a55-9a3c-{n:012d}")
            if len(self.live) > LIVE:
                self.live.popleft()
            pods_now = [workload(key, name=f"pod-{key[-6:]}", request_cpu=100, request_mem=64 << 20,
                                 namespace="batch") for key in self.live]
            for ev in self.ledger.sync(snapshot(pods_now), BATCH, 1000.0 + n):
                self.encoder.event("inc", ev)


def growth_bytes(encoder: Encoder, warm: int, more: int) -> int:
    """Python heap held after `warm` + `more` churned pods, less what was held after `warm`."""
    churn = Churn(encoder)
    tracemalloc.start()
    try:
        churn.run(warm)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        churn.run(more)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_churned_pods_leave_nothing_beyond_the_ring() -> None:
    # warm: every cache at its bound (the ring full several times over); then MORE pods come and go
    grown = growth_bytes(Encoder(event_cache=RING), warm=3 * RING, more=MORE)
    assert grown < 16 * MORE, f"{grown} bytes more after {MORE} more pods: {grown / MORE:.0f} a pod"


def test_the_bound_catches_an_event_cache_that_outgrows_the_ring() -> None:
    """The check above can fail: an encoded-event cache 100 times the ring (the size of the leak the soak
    looked for: ~1.3 KB a pod here) breaks its bound."""
    grown = growth_bytes(Encoder(event_cache=100 * RING), warm=3 * RING, more=MORE)
    assert grown >= 16 * MORE, f"only {grown} bytes more with a cache 100 times the ring"
