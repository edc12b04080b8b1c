"""The tick hook that keeps the ledger in line with the node."""

from __future__ import annotations

import time

from agent.published import ActionRecord, Outcome
from agent.state import Ledger
from qos.actions import ActionKind
from qos.model import NodeSnapshot
from qos.registry import NodeOutputs


class LedgerFeed:
    """Each tick: bring the ledger in line with the snapshot, hand it the batch budget the batch policy holds
    (the admission rule's facts), and turn what was done into notices."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def on_tick(self, snap: NodeSnapshot, outputs: NodeOutputs, records: list[ActionRecord]) -> None:
        self._ledger.sync(snap, outputs.batch_budget, time.time())
        for r in records:
            if r.kind == ActionKind.EVICT and r.outcome in (Outcome.STARTED, Outcome.DRY_RUN):
                self._ledger.notice("eviction", r.reason, {"key": r.target, "policy": r.policy,
                                                           "outcome": r.outcome})
            elif (r.kind in (ActionKind.SET_BE_CPUSET, ActionKind.SET_BE_CPU_QUOTA)
                  and r.outcome == Outcome.APPLIED):
                self._ledger.notice("suppression", r.reason, {"knob": r.kind, "value": r.target})
