"""The BE tier's memory cap each pass (`qos/tier_memory.py` → `TierMemoryExecutor`), recorded beside the
state file (`<state>.tiercap`, agent/state/held_memory.py) so that the next run of this boot knows which cap
on the tier is its own: a run with the cap off, or with batch limits off altogether, lifts a cap an earlier
run left, and leaves one someone else set on the tier (an operator, the kubelet's QoS reservation).

The cap about to be written is recorded before it is (beside the one in place), and what is in place after;
the record is written off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.executors.batch_limits import TierMemoryExecutor
from agent.state.held_memory import HeldCaps
from agent.state.held_record import HeldRecord
from qos.tier_memory import TierCap

log = logging.getLogger("coloc.batch_limits")
NONE = TierCap(None, None)


class TierCapRunner:
    def __init__(self, executor: TierMemoryExecutor, cap: Callable[[], TierCap | None],
                 record: HeldRecord[HeldCaps] | None) -> None:
        self.executor = executor
        self._cap = cap  # the cap in force now (None: hold what is in place)
        self._record = record
        self._recorded: HeldCaps = None
        self._loaded = False

    def adopt_once(self) -> None:
        """The first time: take the cap an earlier run of this boot recorded, if the tier still holds it."""
        if self._record is None or self._loaded:
            return
        self._loaded = True
        self._recorded = self._record.load()
        if self._recorded is None or self._recorded[0] != self.executor.tier:
            return
        if self.executor.adopt(self._recorded[1]):
            cap = self.executor.cap
            log.info("BE tier memory cap: the cap an earlier run left is in place, taken as this run's",
                     extra={"fields": {"cgroup": self.executor.tier, "high": cap and cap.high_bytes,
                                       "max": cap and cap.max_bytes}})

    def _held(self, *caps: TierCap | None) -> HeldCaps:
        kept = tuple(dict.fromkeys(c for c in caps if c is not None and c != NONE))
        return (self.executor.tier, kept) if kept else None

    def _due(self, held: HeldCaps) -> bool:
        """Whether the record must be replaced by `held` (it says otherwise)."""
        return self._record is not None and held != self._recorded

    def _save(self, held: HeldCaps) -> None:
        if self._record is not None and self._record.save(held):
            self._recorded = held

    async def pass_async(self) -> bool:
        """One pass; True when something was written to the tier."""
        self.adopt_once()
        cap = self._cap()
        if self._due(ahead := self._held(self.executor.cap, cap)):
            await asyncio.to_thread(self._save, ahead)
        wrote = self.executor.apply(cap)
        if self.executor.error:  # partly written, perhaps: the record keeps both caps until a pass succeeds
            return wrote
        if self._due(after := self._held(self.executor.cap)):
            await asyncio.to_thread(self._save, after)
        return wrote

    def give_back(self) -> bool:
        """Once, at start, where no controller runs (batch limits off): lift a cap an earlier run left that is
        still its own; True when the tier was written."""
        self.adopt_once()
        wrote = self.executor.apply(NONE) if self.executor.cap is not None else False
        if self._due(after := self._held(self.executor.cap)):
            self._save(after)
        return wrote
