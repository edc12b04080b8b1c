"""Failures the agent rides out are said once, with what failed, not swallowed and not repeated at every
scrape (issue 25)."""

from __future__ import annotations

import asyncio
import logging
import urllib.request

import pytest

from agent.config.metrics import MetricsConfig
from agent.daemon.source_runner import WorkloadSources
from agent.metrics import MetricsHub
from agent.published import Board


def _broken_ledger() -> object:
    raise RuntimeError("ledger view exploded")


def test_a_failing_ledger_view_is_logged_once_and_counted_at_every_scrape(
        caplog: pytest.LogCaptureFixture) -> None:
    hub = MetricsHub(MetricsConfig(port=0))
    server = hub.start(Board(), ledger_view=_broken_ledger)
    try:
        with caplog.at_level(logging.WARNING, "coloc.metrics"):
            for _ in range(3):
                with urllib.request.urlopen(server.url + "/metrics", timeout=5) as resp:
                    text = resp.read().decode()
    finally:
        server.stop()
    assert 'coloc_collector_errors_total{section="ledger_view"} 3.0' in text
    said = [r for r in caplog.records if "ledger view" in r.getMessage()]
    assert said, "the failure is logged"
    assert len({r.getMessage() for r in said}) == len(said), "each place says it once, not at every scrape"
    assert all(r.exc_info and "exploded" in str(r.exc_info[1]) for r in said), "with the error"


class _Crashing:
    """A kubelet source whose refresh task dies as soon as it runs."""

    def __init__(self) -> None:
        self.ran = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        self.ran.set()
        raise RuntimeError("kubelet task crashed")


async def test_a_source_task_that_died_is_named_at_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    kubelet = _Crashing()
    sources = WorkloadSources(None, kubelet, None)  # type: ignore[arg-type]
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, "coloc.sources"):
        task = asyncio.create_task(sources.run(stop))
        await asyncio.wait_for(kubelet.ran.wait(), 5)
        stop.set()
        await asyncio.wait_for(task, 5)
    said = [r for r in caplog.records if r.exc_info and "kubelet task crashed" in str(r.exc_info[1])]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
