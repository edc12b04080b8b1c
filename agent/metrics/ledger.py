"""What the metrics read from the state ledger, with every field optional.

The ledger's own view may be any object with some of these attribute names (or a `LedgerFigures`);
`ledger_figures` reads what is there and leaves the rest None, so the metrics work before the ledger
exists, and with a ledger that does not track everything.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from qos.model import Resources

LIFECYCLE_STATES = ("recovering", "schedulable", "decommissioning", "decommissioned")


@dataclass(frozen=True, slots=True)
class LedgerFigures:
    """Ledger figures as the metrics use them. `drain_deadline` is wall-clock seconds."""

    revision: int | None = None
    lifecycle: str | None = None
    drain_deadline: float | None = None
    batch_origin: Resources | None = None
    k8s_requested: Resources | None = None
    yarn_requested: Resources | None = None
    allocations: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (source, phase) -> n


def _label(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        value = value.value if isinstance(value.value, str) else value.name
    return str(value).strip().lower() or None


def _resources(value: object) -> Resources | None:
    if value is None:
        return None
    if isinstance(value, Resources):
        return value
    cpu = getattr(value, "milli_cpu", None)
    mem = getattr(value, "memory_bytes", None)
    if isinstance(cpu, int | float) and isinstance(mem, int | float):
        return Resources(int(cpu), int(mem))
    raise TypeError(f"expected Resources-like (milli_cpu, memory_bytes), got {type(value).__name__}")


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"expected a finite number, got {value!r}")
    return float(value)


def ledger_figures(view: object) -> LedgerFigures:
    """Read the known attributes of a ledger view; raise TypeError naming the field that is malformed."""
    if isinstance(view, LedgerFigures):
        return view
    try:
        revision = _number(getattr(view, "revision", None))
        deadline = _number(getattr(view, "drain_deadline", None))
        allocations: dict[tuple[str, str], int] = {}
        for key, n in dict(getattr(view, "allocations", None) or {}).items():
            source, phase = key
            allocations[(_label(source) or "unknown", _label(phase) or "unknown")] = int(n)
        return LedgerFigures(
            revision=None if revision is None else int(revision),
            lifecycle=_label(getattr(view, "lifecycle", None)),
            drain_deadline=deadline,
            batch_origin=_resources(getattr(view, "batch_origin", None)),
            k8s_requested=_resources(getattr(view, "k8s_requested", None)),
            yarn_requested=_resources(getattr(view, "yarn_requested", None)),
            allocations=allocations,
        )
    except (TypeError, ValueError) as err:
        raise TypeError(f"ledger view {type(view).__name__}: {err}") from err
