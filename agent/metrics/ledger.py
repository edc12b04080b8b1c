"""What the metrics read from the state ledger, with every field optional.

`ledger_figures` accepts a `LedgerFigures`, the ledger's own `LedgerView` (agent.state.records: `node`,
`revision`, `allocations`), or any object with some of `LedgerFigures`' attribute names; it reads what is
there and leaves the rest None, so the metrics work before the ledger exists and with a partial one.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from qos.model import Resources, Source

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
    drain_allocations_left: int | None = None  # while decommissioning


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


def _from_ledger_view(view: object, node: object) -> LedgerFigures:
    """The ledger's LedgerView: node record (lifecycle, drain, batch allocatable) plus allocation records."""
    lifecycle = _label(getattr(node, "lifecycle", None))
    drain = getattr(node, "drain", None)
    draining = lifecycle in ("decommissioning", "decommissioned")
    origin = _resources(getattr(node, "batch_allocatable", None))
    if draining:  # allocatable reads 0 while draining; the budget that was offered is kept for rollback
        origin = _resources(getattr(drain, "previous_batch_allocatable", None)) or origin
    deadline = _number(getattr(drain, "deadline", None)) if lifecycle == "decommissioning" else None
    left = _number(getattr(drain, "allocations_left", None)) if lifecycle == "decommissioning" else None
    requested = {Source.K8S: Resources(), Source.YARN: Resources()}
    counts: dict[tuple[str, str], int] = {}
    for a in getattr(view, "allocations", ()):
        res = _resources(a.resources) or Resources()
        if a.source in requested:
            requested[a.source] = requested[a.source] + res
        key = (_label(a.source) or "unknown", _label(a.phase) or "unknown")
        counts[key] = counts.get(key, 0) + 1
    revision = _number(getattr(view, "revision", None))
    return LedgerFigures(
        revision=None if revision is None else int(revision),
        lifecycle=lifecycle,
        drain_deadline=deadline,
        batch_origin=origin,
        k8s_requested=requested[Source.K8S],
        yarn_requested=requested[Source.YARN],
        allocations=counts,
        drain_allocations_left=None if left is None else int(left),
    )


def ledger_figures(view: object) -> LedgerFigures:
    """Read the known attributes of a ledger view; raise TypeError naming the field that is malformed."""
    if isinstance(view, LedgerFigures):
        return view
    node = getattr(view, "node", None)
    if node is not None:
        try:
            return _from_ledger_view(view, node)
        except (TypeError, ValueError, AttributeError) as err:
            raise TypeError(f"ledger view {type(view).__name__}: {err}") from err
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
