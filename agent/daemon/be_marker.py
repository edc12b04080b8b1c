"""The marker of BE CPU suppression a run may leave on the tier (`agent/state/held_be.py`), at start and exit.

A run that suppresses marks the tier before its loop starts; a clean exit that released the tier clears the
mark. A run with suppression off that finds the mark for its own tier, made in this boot, releases the tier
at its first tick: the run before was killed while suppressing, and left the tier confined.
"""

from __future__ import annotations

import logging

from agent.executors.apply import ActionExecutor
from agent.state.held_be import suppression_record
from agent.state.ledger import read_boot_id

log = logging.getLogger("coloc.executor")


class SuppressionMarker:
    def __init__(self, state_path: str, tier: str) -> None:
        self._record = suppression_record(state_path, read_boot_id()) if state_path else None
        self._tier = tier

    def start(self, executor: ActionExecutor, suppressing: bool) -> None:
        """Before the first tick (file I/O with fsync, once)."""
        if self._record is None or executor.dry_run:
            return
        if suppressing:
            self._record.save(self._tier)
        elif self._record.load() == self._tier:
            log.info("BE CPU suppression is off, and an earlier run of this boot was killed while it "
                     "suppressed: the tier is released at the first tick",
                     extra={"fields": {"tier": self._tier}})
            executor.release_left()

    def exit(self, released: bool) -> None:
        """After the executor's release at shutdown: the mark goes once the tier is released."""
        if self._record is not None and released and self._record.path.exists():
            self._record.save(None)
