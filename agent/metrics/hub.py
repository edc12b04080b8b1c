"""The metrics hub: a private registry, the histograms the loop feeds, and the server that exposes them.

The loop calls `observe(published)` once per tick (the tick and collection durations go into histograms,
the tick's action records into per-policy tallies); scrapes build everything else from the board's latest
`Published` through `ColocCollector`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector

from agent import __version__
from agent.config.metrics import MetricsConfig
from agent.metrics.collector import ColocCollector, LedgerView
from agent.metrics.health import HealthConfig
from agent.metrics.server import MetricsServer, ServerLimits
from agent.metrics.tally import ActionTally
from agent.published import Board, Published

log = logging.getLogger("coloc.metrics")

TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class MetricsHub:
    """Owns the private registry. `observe` is for the loop; `start` serves /metrics, /healthz, /readyz."""

    def __init__(
        self,
        config: MetricsConfig | None = None,
        *,
        version: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or MetricsConfig()
        self.version = version or __version__
        self.registry = CollectorRegistry(auto_describe=False)
        self.actions = ActionTally()
        self._clock = clock
        self._last_tick: int | None = None
        self._observe_lock = threading.Lock()
        self._collector: ColocCollector | None = None
        self._board: Board | None = None
        self._ledger_view: LedgerView | None = None
        ProcessCollector(registry=self.registry)
        self.tick_duration = Histogram(
            "coloc_tick_duration_seconds",
            "Duration of one loop tick (collect, decide, act, publish).",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.collect_duration = Histogram(
            "coloc_collect_duration_seconds",
            "Duration of one collection of every source into a snapshot.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )

    def observe(self, published: Published) -> None:
        """Feed one tick's publication; a tick already observed (same or lower number) is ignored."""
        with self._observe_lock:
            if self._last_tick is not None and published.tick <= self._last_tick:
                return
            self._last_tick = published.tick
        self.tick_duration.observe(max(0.0, published.tick_duration_s))
        self.collect_duration.observe(max(0.0, published.collect_duration_s))
        self.actions.record(published.actions)

    def attach(self, board: Board, ledger_view: LedgerView | None = None) -> ColocCollector:
        """Register the collector over `board` (once); `start` does this for you."""
        if self._collector is not None:
            raise RuntimeError("MetricsHub: a board is already attached")
        self._collector = ColocCollector(
            board,
            version=self.version,
            top_n=self.config.top_n,
            max_label_values=self.config.max_label_values,
            actions=self.actions,
            ledger_view=ledger_view,
            clock=self._clock,
        )
        self._board = board
        self._ledger_view = ledger_view
        self.registry.register(self._collector)
        return self._collector

    def start(
        self, board: Board, ledger_view: LedgerView | None = None, health: HealthConfig | None = None,
        persistence_error: Callable[[], str | None] | None = None,
    ) -> MetricsServer:
        """Attach to `board` and serve on `config.bind:config.port` from a daemon thread."""
        if self._collector is None:
            self.attach(board, ledger_view)
        elif board is not self._board:
            raise RuntimeError("MetricsHub.start: attached to another board")
        health = health or HealthConfig(
            stall_intervals=self.config.stall_intervals,
            startup_grace_s=self.config.startup_grace_s,
            clock=self._clock,
        )
        limits = ServerLimits(max_connections=self.config.max_connections,
                              read_timeout_s=self.config.read_timeout_s,
                              write_timeout_s=self.config.write_timeout_s)
        ledger_key = _LedgerKey(self._ledger_view)

        def inputs() -> tuple[object, ...]:
            return (board.get(), ledger_key())

        return MetricsServer.start(self.registry, board, self.config.bind_address, self.config.port, health,
                                   limits, inputs, persistence_error or (lambda: None))


class _LedgerKey:
    """The ledger view as the server's cache key. A failing view is no key (every scrape builds afresh, and
    the collector leaves the ledger series out and counts it); the first failure in a row is logged here."""

    def __init__(self, view: LedgerView | None) -> None:
        self._view = view
        self._failing = False

    def __call__(self) -> object:
        if self._view is None:
            return None
        try:
            key = self._view()
        except Exception:
            if not self._failing:
                log.warning("metrics: the ledger view failed; scrapes are built afresh until it reads again",
                            exc_info=True)
            self._failing = True
            return object()
        self._failing = False
        return key
