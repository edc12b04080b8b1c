"""Fixtures for the metrics tests: a hub serving a board on a free port, and a real Prometheus."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from promserver import PrometheusServer, available

from agent.metrics import HealthConfig, MetricsConfig, MetricsHub, MetricsServer
from agent.metrics.collector import LedgerView
from agent.published import Board

StartPrometheus = Callable[..., PrometheusServer]
Serve = Callable[..., tuple[MetricsHub, MetricsServer]]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[StartPrometheus]:
    """Start real Prometheus servers with `prometheus(targets, **kw)`; all are stopped at teardown."""
    if not available():
        pytest.skip("the prometheus binary is not installed (Debian package prometheus)")
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], **kw: object) -> PrometheusServer:
        server = PrometheusServer(tmp_path, targets, **kw)  # type: ignore[arg-type]
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def serve() -> Iterator[Serve]:
    """`serve(board, ledger_view=None, health=None, **config)` starts a hub's server on a free port."""
    servers: list[MetricsServer] = []

    def start(
        board: Board,
        ledger_view: LedgerView | None = None,
        health: HealthConfig | None = None,
        **config: object,
    ) -> tuple[MetricsHub, MetricsServer]:
        hub = MetricsHub(MetricsConfig(**{"port": 0, **config}))  # type: ignore[arg-type]
        server = hub.start(board, ledger_view=ledger_view, health=health)
        servers.append(server)
        return hub, server

    yield start
    for server in servers:
        server.stop()
