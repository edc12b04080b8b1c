"""Counts of action records, shared by the hub (which feeds them) and the collector (which exposes them)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from agent.published import ActionRecord

OTHER = "other"  # the label value that stands for every value past a cardinality limit

ActionKey = tuple[str, str, str]  # (policy, kind, outcome)


class ActionTally:
    """Counts of action records by (policy, kind, outcome) and the time of the latest of each.

    Fed each tick's own records (`Published.actions`), each record once. At most `max_keys` keys; the rest
    go to `other`.
    """

    def __init__(self, max_keys: int = 256) -> None:
        self._lock = threading.Lock()
        self._max_keys = max_keys
        self._tally: dict[ActionKey, tuple[int, float]] = {}

    def record(self, records: Iterable[ActionRecord]) -> None:
        """Count these records."""
        with self._lock:
            for r in records:
                key: ActionKey = (r.policy, r.kind, r.outcome)
                if key not in self._tally and len(self._tally) >= self._max_keys:
                    key = (OTHER, OTHER, OTHER)
                n, last = self._tally.get(key, (0, 0.0))
                self._tally[key] = (n + 1, max(last, r.at))

    def get(self) -> dict[ActionKey, tuple[int, float]]:
        with self._lock:
            return dict(self._tally)
