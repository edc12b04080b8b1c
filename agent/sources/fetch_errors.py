"""Failed fetches by source and kind (`too_large`, `garbage`, `down`, …), counted for the metrics.

Process-wide: the sources count, the metrics collector reads; kinds are the short, stable set of
`FetchError.kind` plus the sources' own (`empty`), so the label set stays small.
"""

from __future__ import annotations

import threading


class FetchErrorTally:
    """Monotonic counts of failed fetches keyed by (source, kind); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def inc(self, source: str, kind: str) -> None:
        with self._lock:
            key = (source, kind or "unknown")
            self._counts[key] = self._counts.get(key, 0) + 1

    def get(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


FETCH_ERRORS = FetchErrorTally()
