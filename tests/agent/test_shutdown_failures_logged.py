"""A failure met while the agent shuts down is logged once, naming what failed, and the shutdown goes on
(it was swallowed without a line: `contextlib.suppress(Exception)`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agent.api.server import ApiServer
from agent.cli.run import _settle
from agent.config.api import ApiConfig


async def test_a_task_that_failed_is_logged_once_with_its_name(caplog: pytest.LogCaptureFixture) -> None:
    async def boom() -> None:
        raise RuntimeError("kubelet source blew up")

    task = asyncio.ensure_future(boom())
    with caplog.at_level(logging.WARNING, logger="coloc.run"):
        await _settle(task, "sources")
    lines = [r for r in caplog.records if r.name == "coloc.run"]
    assert len(lines) == 1 and "sources" in lines[0].getMessage(), lines
    assert lines[0].exc_info is not None and "kubelet source blew up" in str(lines[0].exc_info[1])


async def test_a_task_that_ended_well_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def fine() -> None:
        return None

    with caplog.at_level(logging.DEBUG, logger="coloc.run"):
        await _settle(asyncio.ensure_future(fine()), "sources")
    assert not [r for r in caplog.records if r.name == "coloc.run"]


class _BrokenHealth:
    async def enter_graceful_shutdown(self) -> None:
        raise RuntimeError("health servicer gone")


async def test_the_api_stop_logs_a_health_failure_and_still_stops(caplog: pytest.LogCaptureFixture) -> None:
    stopped: list[Any] = []

    class _Server:
        async def stop(self, grace: float | None) -> None:
            stopped.append(grace)

    api = ApiServer(service=None, health=_BrokenHealth(), policy=None, cfg=ApiConfig())  # type: ignore[arg-type]
    api.servers = {"read": _Server()}  # type: ignore[dict-item]
    with caplog.at_level(logging.WARNING, logger="coloc.api"):
        await api.stop(0.5)
    assert stopped == [0.5]
    lines = [r for r in caplog.records if r.name == "coloc.api"]
    assert len(lines) == 1 and "NOT_SERVING" in lines[0].getMessage(), lines
