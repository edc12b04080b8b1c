"""Waiting on a condition instead of sleeping a guessed time: poll it until it holds or time runs out, and
check that something keeps holding over a window all along, not once at its end."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait(pred: Callable[[], object], timeout: float = 10.0, every: float = 0.1) -> bool:
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


def window(read: Callable[[], T], seconds: float) -> tuple[T, T]:
    """`read()` at the start and at the end of a measurement window of `seconds` (rates from counters):
    the one pause a test takes on purpose; it waits for nothing to happen."""
    first = read()
    time.sleep(seconds)
    return first, read()


def settled(read: Callable[[], T], seconds: float, timeout: float = 10.0, every: float = 0.05) -> T:
    """`read()` once it returned the same value for `seconds` (read every `every` s), or its last value after
    `timeout` s: what something settled to, instead of reading it after a guessed pause."""
    end = time.monotonic() + timeout
    value = read()
    since = time.monotonic()
    while time.monotonic() - since < seconds and time.monotonic() < end:
        time.sleep(every)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def holds(pred: Callable[[], object], seconds: float, every: float = 0.1) -> bool:
    """Whether `pred()` held at every check for `seconds` (false at the first check it fails): a claim
    that nothing happens, checked all along the window."""
    end = time.monotonic() + seconds
    while True:
        if not pred():
            return False
        if time.monotonic() >= end:
            return True
        time.sleep(every)


async def until(pred: Callable[[], Any], timeout: float = 10.0, every: float = 0.05) -> Any:
    """The first true value of `pred()` (plain or async) within `timeout` s, or a false one after it; the
    event loop runs meanwhile. An OSError counts as not yet."""
    end = time.monotonic() + timeout
    while True:
        try:
            got = pred()
            if inspect.isawaitable(got):
                got = await got
        except OSError:
            got = None
        if got or time.monotonic() >= end:
            return got
        await asyncio.sleep(every)


async def still(pred: Callable[[], object], seconds: float, every: float = 0.05) -> bool:
    """`holds` on the event loop: whether `pred()` held at every check for `seconds`."""
    end = time.monotonic() + seconds
    while True:
        if not pred():
            return False
        if time.monotonic() >= end:
            return True
        await asyncio.sleep(every)


async def wait_for(pred: Callable[[], bool], timeout: float, poll: float = 0.01) -> float | None:
    """Seconds until `pred()` holds, or None after `timeout` (the event loop keeps running meanwhile)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if pred():
            return time.monotonic() - start
        await asyncio.sleep(poll)
    return None
