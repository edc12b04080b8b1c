"""Waiting on a condition instead of sleeping a guessed time: poll it until it holds or time runs out, and
check that something keeps holding over a window all along, not once at its end."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def _rounds(done: Callable[[Any], object], seconds: float) -> Generator[None, Any, Any]:
    """The loop every poll here runs: each check's value is sent in, and the loop ends with it (its return
    value) once `done(value)` holds or `seconds` have passed since the loop started; the caller sleeps
    between rounds (`time.sleep` or on the event loop)."""
    end = time.monotonic() + seconds
    while True:
        got = yield
        if done(got) or time.monotonic() >= end:
            return got


def _poll(check: Callable[[], T], done: Callable[[T], object], seconds: float, every: float) -> T:
    rounds = _rounds(done, seconds)
    next(rounds)
    while True:
        try:
            rounds.send(check())
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        time.sleep(every)


async def _poll_async(check: Callable[[], Any], done: Callable[[Any], object], seconds: float,
                      every: float) -> Any:
    rounds = _rounds(done, seconds)
    next(rounds)
    while True:
        got = check()
        try:
            rounds.send(await got if inspect.isawaitable(got) else got)
        except StopIteration as stop:
            return stop.value
        await asyncio.sleep(every)


def _not_yet_on_oserror(pred: Callable[[], T]) -> Callable[[], T | None]:
    """`pred`, with an OSError (a server not up yet) as a None."""
    def check() -> T | None:
        try:
            return pred()
        except OSError:
            return None
    return check


async def _awaited(got: Awaitable[T]) -> T | None:
    try:
        return await got
    except OSError:
        return None


def wait(pred: Callable[[], object], timeout: float = 10.0, every: float = 0.1) -> bool:
    """Whether `pred()` held within `timeout` s; an OSError (a server not up yet) counts as not yet."""
    return bool(_poll(_not_yet_on_oserror(pred), bool, timeout, every))


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
    return bool(_poll(pred, _failed, seconds, every))


def _failed(got: object) -> bool:
    return not got


async def until(pred: Callable[[], Any], timeout: float = 10.0, every: float = 0.05) -> Any:
    """The first true value of `pred()` (plain or async) within `timeout` s, or a false one after it; the
    event loop runs meanwhile. An OSError counts as not yet."""
    def check() -> Any:
        got = _not_yet_on_oserror(pred)()
        return _awaited(got) if inspect.isawaitable(got) else got
    return await _poll_async(check, bool, timeout, every)


async def still(pred: Callable[[], object], seconds: float, every: float = 0.05) -> bool:
    """`holds` on the event loop: whether `pred()` held at every check for `seconds`."""
    return bool(await _poll_async(pred, _failed, seconds, every))


async def wait_for(pred: Callable[[], bool], timeout: float, poll: float = 0.01) -> float | None:
    """Seconds until `pred()` holds, or None after `timeout` (the event loop keeps running meanwhile)."""
    start = time.monotonic()
    if await _poll_async(pred, bool, timeout, poll):
        return time.monotonic() - start
    return None
