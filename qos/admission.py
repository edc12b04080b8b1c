"""One admission rule for new batch allocations, asked by the Admit RPC (through the ledger) and by the batch
policy.

A new allocation is refused, with the reason, when
1. the node takes no new work (its lifecycle: recovering, draining, ...);
2. a source's data is stale: what the node holds may have changed unseen;
3. the batch origin is unknown (not read or computed yet) or held (koord-manager's value is suspect:
   collapsed, a sharp drop being confirmed, or unreadable), so the room left is not known;
4. the node is overcommitted: what its schedulers hold plus what other allocators hold (their `koord-batch`
   entries in `node.koordinator.sh/thirdPartyAllocations`, which koord-manager subtracts) exceeds the origin;
5. the request does not fit in what is left.
Pure: the callers hand it the facts (`AdmissionFacts`); no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from qos.model import Resources


class Refusal(enum.Enum):
    INVALID = "invalid"
    NOT_ACCEPTING = "not_accepting"  # the lifecycle takes no new work
    BUDGET_UNKNOWN = "budget_unknown"  # stale sources, or an unknown or held origin
    INSUFFICIENT_CPU = "insufficient_cpu"  # overcommitted in CPU, or the request's CPU does not fit
    INSUFFICIENT_MEMORY = "insufficient_memory"


@dataclass(frozen=True, slots=True)
class BatchBudget:
    """The batch budget as the batch policy holds it at a tick.

    `origin`: origin_batch_total in force (None: unknown); `held`: why it may not be counted on now (None: it
    may); `others`: what other allocators hold (the `koord-batch` entries koord-manager subtracts)."""

    origin: Resources | None = None
    held: str | None = None
    others: Resources = field(default_factory=Resources)

    @property
    def allocatable(self) -> Resources | None:
        """What the node's own schedulers share: `max(origin − others, 0)`, as koord-manager computes it."""
        if self.origin is None:
            return None
        left = self.origin - self.others
        return Resources(max(0, left.milli_cpu), max(0, left.memory_bytes))


@dataclass(frozen=True, slots=True)
class AdmissionFacts:
    """Everything the rule looks at. `allocated`: what the node's own schedulers hold (admitted allocations
    not launched yet included); `stale`: source name → why its data cannot be trusted; `closed`: why the node
    takes no new work (None: it does)."""

    budget: BatchBudget
    allocated: Resources
    stale: Mapping[str, str] = field(default_factory=dict)
    closed: str | None = None

    @property
    def overcommit(self) -> Resources:
        """By how much the holdings exceed the origin (0 where they fit; 0 while the origin is unknown)."""
        if self.budget.origin is None:
            return Resources()
        over = self.allocated + self.budget.others - self.budget.origin
        return Resources(max(0, over.milli_cpu), max(0, over.memory_bytes))

    @property
    def free(self) -> Resources:
        allocatable = self.budget.allocatable
        if allocatable is None:
            return Resources()
        left = allocatable - self.allocated
        return Resources(max(0, left.milli_cpu), max(0, left.memory_bytes))


@dataclass(frozen=True, slots=True)
class Admission:
    accepted: bool
    reason: str
    refusal: Refusal | None = None


def stale_reason(stale: Mapping[str, str]) -> str:
    """The stale sources, named with their reasons, in one line."""
    return "stale data (" + ", ".join(f"{k}: {v}" for k, v in sorted(stale.items())) + ")"


def _holdings(origin: Resources, facts: AdmissionFacts, cpu: bool, unit: str) -> str:
    """What the origin is and who holds it, in one dimension (CPU or memory)."""
    def of(r: Resources) -> int:
        return r.milli_cpu if cpu else r.memory_bytes

    others = of(facts.budget.others)
    return (f"batch origin {of(origin)}{unit}" + (f", other allocators {others}{unit}" if others else "")
            + f", allocated {of(facts.allocated)}{unit}")


def admit(request: Resources, facts: AdmissionFacts) -> Admission:
    """Whether a new batch allocation of `request` may be placed on this node now, and why not."""
    if request.milli_cpu < 0 or request.memory_bytes < 0:
        return Admission(False, "invalid request: negative resources", Refusal.INVALID)
    if facts.closed is not None:
        return Admission(False, facts.closed, Refusal.NOT_ACCEPTING)
    if facts.stale:
        return Admission(False, f"{stale_reason(facts.stale)}: the batch room is not known",
                         Refusal.BUDGET_UNKNOWN)
    origin, held = facts.budget.origin, facts.budget.held
    if origin is None:
        return Admission(False, "batch origin unknown: " + (held or "not read or computed yet"),
                         Refusal.BUDGET_UNKNOWN)
    if held is not None:
        return Admission(False, f"batch origin held: {held}", Refusal.BUDGET_UNKNOWN)
    over = facts.overcommit
    if over.milli_cpu > 0 or over.memory_bytes > 0:
        cpu = over.milli_cpu > 0
        return Admission(False, f"batch overcommitted by {over.milli_cpu}m CPU / {over.memory_bytes} B "
                                f"memory ({_holdings(origin, facts, cpu, 'm' if cpu else ' B')})",
                         Refusal.INSUFFICIENT_CPU if cpu else Refusal.INSUFFICIENT_MEMORY)
    free = facts.free
    if request.fits_in(free):
        return Admission(True, "fits")
    if request.milli_cpu > free.milli_cpu:
        return Admission(False, f"requests {request.milli_cpu} milli-CPU, {free.milli_cpu} free "
                                f"({_holdings(origin, facts, True, '')})", Refusal.INSUFFICIENT_CPU)
    return Admission(False, f"requests {request.memory_bytes} bytes of memory, {free.memory_bytes} free "
                            f"({_holdings(origin, facts, False, '')})", Refusal.INSUFFICIENT_MEMORY)
