"""The node's allocation state: the ledger, its records, events, and its persistence."""

from agent.state.errors import (
    InvalidRequest,
    LedgerError,
    LifecycleError,
    RevisionAhead,
    RevisionGone,
    StaleEpoch,
    StateFileError,
    WatcherDropped,
)
from agent.state.ledger import Ledger, LedgerConfig
from agent.state.lifecycle import Trigger
from agent.state.records import (
    AckResult,
    AdmitRequest,
    AdmitResult,
    Allocation,
    Application,
    DrainPhase,
    DrainStatus,
    Event,
    EventType,
    Figures,
    Identity,
    LedgerView,
    Lifecycle,
    NodeRecord,
    Notice,
    Phase,
    Refusal,
    figures,
)
from agent.state.ring import Subscription

__all__ = [
    "AckResult", "AdmitRequest", "AdmitResult", "Allocation", "Application", "DrainPhase", "DrainStatus",
    "Event", "EventType", "Figures", "Identity", "InvalidRequest", "Ledger", "LedgerConfig", "LedgerError",
    "LedgerView", "Lifecycle", "LifecycleError", "NodeRecord", "Notice", "Phase", "Refusal", "RevisionAhead",
    "RevisionGone", "StaleEpoch", "StateFileError", "Subscription", "Trigger", "WatcherDropped", "figures",
]
