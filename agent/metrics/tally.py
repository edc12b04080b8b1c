"""Counts of action records, shared by the hub (which feeds them) and the collector (which exposes them)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from agent.published import ActionRecord

OTHER = "other"  # the label value that stands for every value past a cardinality limit

ActionKey = tuple[str, str, str]  # (policy, kind, outcome)


class ActionTally:
    """Counts of action records by (policy, kind, outcome) and the time of the latest of each.

    A record is counted once: the loop republishes its ring of recent actions every tick, so only records
    that were not in the previous publication are new. At most `max_keys` keys; the rest go to `other`.
    """

    def __init__(self, max_keys: int = 256) -> None:
        self._lock = threading.Lock()
        self._max_keys = max_keys
        self._tally: dict[ActionKey, tuple[int, float]] = {}
        self._previous: set[tuple[object, ...]] = set()

    def record(self, records: Iterable[ActionRecord]) -> int:
        """Count the records not seen in the previous call; return how many were new."""
        current: set[tuple[object, ...]] = set()
        new = 0
        with self._lock:
            for r in records:
                ident = (r.at, r.policy, r.kind, r.target, r.outcome, r.reason)
                current.add(ident)
                if ident in self._previous:
                    continue
                new += 1
                key: ActionKey = (r.policy, r.kind, r.outcome)
                if key not in self._tally and len(self._tally) >= self._max_keys:
                    key = (OTHER, OTHER, OTHER)
                n, last = self._tally.get(key, (0, 0.0))
                self._tally[key] = (n + 1, max(last, r.at))
            self._previous = current
        return new

    def get(self) -> dict[ActionKey, tuple[int, float]]:
        with self._lock:
            return dict(self._tally)
