"""Whether a run may have left BE CPU suppression on the tier (`<state>.besuppress`, held_record.py).

Written (the tier's cgroup) at start by a run that suppresses, cleared once a clean exit has released the
tier. A run that finds it for its own tier, in this boot, with suppression turned off, releases the tier at
its first tick (`ActionExecutor.release_left`): a SIGKILLed or OOM-killed agent releases nothing, and
without the marker a run with suppression off never writes the tier, so BE would stay confined for good.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.state.held_record import HeldRecord, checked_rel


class SuppressionCodec:
    format = "coloc-agent/be-suppression/v1"
    key = "tier"
    what = "BE CPU suppression"

    def empty(self) -> str | None:
        return None

    def encode(self, value: str | None) -> Any:
        return value

    def decode(self, payload: Any) -> str | None:
        return None if payload is None else checked_rel(payload, "tier")


def suppression_record(state_path: str | Path, boot_id: str) -> HeldRecord[str | None]:
    """`<state file>.besuppress`."""
    return HeldRecord(state_path, "besuppress", boot_id, SuppressionCodec())
