"""The bounded ring of recent events and the per-watcher subscription fed from it.

Revisions are contiguous (one event per revision), so the ring is indexed by arithmetic, not search.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable

from agent.state.errors import RevisionGone, WatcherDropped
from agent.state.records import Event


class EventRing:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be ≥ 1, got {capacity}")
        self._events: deque[Event] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._events)

    def append(self, event: Event) -> None:
        if self._events and event.revision != self._events[-1].revision + 1:
            raise ValueError(f"event revision {event.revision} does not follow {self._events[-1].revision}")
        self._events.append(event)

    def oldest_watchable(self, current: int) -> int:
        """The lowest `from_revision` a watch can resume from: every later event is still held."""
        return self._events[0].revision - 1 if self._events else current

    def after(self, revision: int, current: int) -> list[Event]:
        """Every event with a revision > `revision`; RevisionGone when some of them were dropped."""
        oldest = self.oldest_watchable(current)
        if revision < oldest:
            raise RevisionGone(revision, oldest)
        if not self._events:
            return []
        start = revision - (self._events[0].revision - 1)
        return list(itertools.islice(self._events, start, None))

    def last(self, n: int) -> list[Event]:
        return list(itertools.islice(self._events, max(0, len(self._events) - n), None))


class Subscription:
    """One watcher: the backlog it asked for, then live events through one bounded queue.

    When the queue is full the ledger cuts the watcher off (`dropped` says why); the watcher still gets
    what was queued, then WatcherDropped, so memory stays bounded and the stream stays gap-free. `on_drop`
    is called once, with the subscription, when that happens: its reader may be stuck in a write that never
    completes (a client that stopped reading), so it cannot be relied on to notice by itself.
    """

    def __init__(self, backlog: list[Event], maxsize: int,
                 on_drop: Callable[[Subscription], None] | None = None) -> None:
        self._backlog: deque[Event] = deque(backlog)
        self._live: deque[Event] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.wake_pending = False  # queued in the ledger's staggered wake-up (see `Ledger._wake_later`)
        self.maxsize = maxsize
        self.dropped: str | None = None
        self.closed = False
        self._on_drop = on_drop

    def offer(self, event: Event) -> bool:
        """Queue a live event; False (and `dropped` set) when the watcher is too far behind. The reader is
        not woken here: the ledger wakes waiting readers a few at a time (`waiting`, `wake`)."""
        if len(self._live) >= self.maxsize:
            self.dropped = (f"watcher fell {self.maxsize} events behind at revision {event.revision} and was "
                            "dropped; resume from the last revision you applied")
            if self._on_drop is not None:
                self._on_drop(self)
            return False
        self._live.append(event)
        return True

    @property
    def waiting(self) -> bool:
        """Whether the reader is parked in `next_batch` waiting for an event."""
        return self._waiter is not None and not self._waiter.done()

    def wake(self) -> None:
        self.wake_pending = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self, out: list[Event], max_events: int) -> None:
        while self._backlog and len(out) < max_events:
            out.append(self._backlog.popleft())
        while self._live and len(out) < max_events:
            out.append(self._live.popleft())

    async def next_batch(self, max_events: int, timeout: float) -> list[Event]:
        """Up to `max_events` events in revision order; [] when nothing came within `timeout` seconds."""
        out: list[Event] = []
        self._take(out, max_events)
        if out:
            return out
        if self.dropped is not None:
            raise WatcherDropped(self.dropped)
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            # asyncio.timeout, not wait_for: wait_for (3.11) can swallow a cancellation that races with
            # an arriving event, and a cancelled watcher would then live on.
            async with asyncio.timeout(timeout):
                await self._waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None
        self._take(out, max_events)
        return out

    @property
    def pending(self) -> int:
        return len(self._backlog) + len(self._live)
