"""The BE tier's memory cap each pass (`qos/tier_memory.py` → `TierMemoryExecutor`). The cap is a holding
(`cgroups/holdings.py`): a run with the cap off, or with batch limits off altogether, lifts a cap an earlier
run of this boot left, and leaves one someone else set on the tier since (an operator, the kubelet's QoS
reservation).
"""

from __future__ import annotations

from collections.abc import Callable

from agent.executors.batch_limits import TierMemoryExecutor
from qos.tier_memory import TierCap


class TierCapRunner:
    def __init__(self, executor: TierMemoryExecutor, cap: Callable[[], TierCap | None]) -> None:
        self.executor = executor
        self._cap = cap  # the cap in force now (None: hold what is in place)

    def pass_once(self) -> bool:
        """One pass, then what an earlier run held and this one does not is given back; True when something
        was written to the tier."""
        wrote = self.executor.apply(self._cap())
        return bool(self.executor.settle()) or wrote
