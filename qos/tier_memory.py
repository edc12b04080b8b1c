"""A hard cap on the BE tier's memory from the node's batch-memory budget (beyond koordlet and yarn-copilot,
where BE memory is bounded only by per-pod limits and polling evictors).

Modes: `off` (nothing written; a cap this agent set is lifted), `high` (`memory.high` = budget: the kernel
reclaims and throttles BE at its budget; v1 has no memory.high, the writer falls back to the soft limit),
`high+max` (`memory.high` = budget × high_percent, `memory.max` / `memory.limit_in_bytes` = budget: BE is
reclaimed from high_percent and stopped, by the OOM killer inside the tier, at its budget). A budget of 0 or
an unknown one holds what is in place: a draining node reports no batch room, and a degraded origin reads
0; neither is a reason to stop the BE work already running. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

OFF, HIGH, HIGH_MAX = "off", "high", "high+max"
MODES = (OFF, HIGH, HIGH_MAX)
MIN_CAP_BYTES = 64 << 20  # never below this: a tier capped to a few pages kills everything in it


@dataclass(frozen=True, slots=True)
class TierCap:
    """What the BE tier gets: None = unlimited."""

    high_bytes: int | None
    max_bytes: int | None


def tier_memory_cap(budget_bytes: int | None, mode: str, high_percent: float = 90.0) -> TierCap | None:
    """The tier's cap for this budget and mode; None: hold what is in place."""
    if mode not in MODES:
        raise ValueError(f"tier memory mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 0 < high_percent <= 100:
        raise ValueError(f"tier memory high_percent must be in (0, 100], got {high_percent}")
    if mode == OFF:
        return TierCap(None, None)
    if budget_bytes is None or budget_bytes <= 0:
        return None
    budget = max(budget_bytes, MIN_CAP_BYTES)
    if mode == HIGH:
        return TierCap(budget, None)
    return TierCap(max(MIN_CAP_BYTES, int(budget * high_percent) // 100), budget)
