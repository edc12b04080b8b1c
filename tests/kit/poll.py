"""Waiting on a condition instead of sleeping a guessed time: poll it until it holds or time runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait(pred: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    """Whether `pred()` held within `timeout` s; an OSError (a server not up yet) counts as not yet."""
    end = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return True
        except OSError:
            pass
        if time.monotonic() >= end:
            return False
        time.sleep(every)


async def wait_for(pred: Callable[[], bool], timeout: float, poll: float = 0.01) -> float | None:
    """Seconds until `pred()` holds, or None after `timeout` (the event loop keeps running meanwhile)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if pred():
            return time.monotonic() - start
        await asyncio.sleep(poll)
    return None
