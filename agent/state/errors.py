"""Errors the ledger raises; the API maps each to one gRPC status code."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of everything the ledger refuses."""


class InvalidRequest(LedgerError):
    """A request field is malformed (→ INVALID_ARGUMENT). `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StaleEpoch(LedgerError):
    """A scheduler epoch lower than one already seen: a fenced-off scheduler (→ FAILED_PRECONDITION)."""

    def __init__(self, epoch: int, highest: int) -> None:
        super().__init__(f"scheduler_epoch {epoch} is stale: this agent has already seen epoch {highest}")
        self.epoch = epoch
        self.highest = highest


class RevisionGone(LedgerError):
    """The requested revision fell out of the event ring (→ OUT_OF_RANGE): re-snapshot."""

    def __init__(self, revision: int, oldest: int) -> None:
        super().__init__(f"revision {revision} is no longer in the event ring (oldest watchable: {oldest}); "
                         "take a new snapshot")
        self.revision = revision
        self.oldest = oldest


class RevisionAhead(LedgerError):
    """A revision the ledger has not reached (→ INVALID_ARGUMENT)."""

    def __init__(self, field: str, revision: int, current: int) -> None:
        super().__init__(f"{field}: revision {revision} is ahead of the ledger (current revision {current})")
        self.field = field


class LifecycleError(LedgerError):
    """A lifecycle transition that is not allowed from the current state (→ FAILED_PRECONDITION)."""


class WatcherDropped(LedgerError):
    """A watcher fell behind by more than its queue holds and was cut off (→ RESOURCE_EXHAUSTED)."""


class StateFileError(LedgerError):
    """The state file could not be written or its directory cannot be used."""
