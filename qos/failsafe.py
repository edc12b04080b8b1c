"""Fail safe for eviction: stale or missing data means no eviction, and a reason that says so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from qos import validation
from qos.model import NodeSnapshot


@dataclass(frozen=True, slots=True)
class FailsafeConfig:
    """`max_sample_age_s`: a workload whose usage is older than this blocks every eviction this tick."""

    max_sample_age_s: float = validation.bounded(5.0, 0.1, 3600.0)

    def __post_init__(self) -> None:
        validation.check_bounds(self, "failsafe")


def eviction_blocker(
    snapshot: NodeSnapshot, config: FailsafeConfig, required: Mapping[str, object] | None = None
) -> str | None:
    """Why evicting on this snapshot would be unsafe, or None when it is safe.

    `required` names the metrics the caller's formula reads; a None value among them is missing data.
    One missing metric blocks the decision; it never widens it (no "act on all").
    """
    reasons: list[str] = []
    missing = sorted(name for name, value in (required or {}).items() if value is None)
    if missing:
        reasons.append("missing " + ", ".join(missing))
    if snapshot.stale:
        reasons.append(
            "stale sources: " + "; ".join(f"{name} ({why})" for name, why in sorted(snapshot.stale.items()))
        )
    bound = config.max_sample_age_s
    # `not (age <= bound)` also catches a NaN age.
    old = sorted(w.key for w in snapshot.workloads if not (w.sample_age_s <= bound))
    if old:
        shown = ", ".join(old[:3]) + (f" and {len(old) - 3} more" if len(old) > 3 else "")
        reasons.append(f"usage older than {bound:g} s for {shown}")
    return "; ".join(reasons) if reasons else None
