"""What the ledger holds, as immutable records: applications, allocations, the node, events and views.

Every record carries `revision`: the ledger revision that last changed it. Times are wall-clock seconds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from qos.model import Resources, Source

Tags = tuple[tuple[str, str], ...]


class Phase(enum.Enum):
    """Where an allocation is in its life. Every phase counts as used batch capacity."""

    PENDING_LAUNCH = "PENDING_LAUNCH"  # admitted through the API, not yet seen by a source
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"


class Lifecycle(enum.Enum):
    """The node's standing towards the central scheduler (transitions: `agent.state.lifecycle`)."""

    RECOVERING = "RECOVERING"  # waiting for a central scheduler's AckRecovery of this incarnation's state
    SCHEDULABLE = "SCHEDULABLE"
    DECOMMISSIONING = "DECOMMISSIONING"
    DECOMMISSIONED = "DECOMMISSIONED"


class EventType(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    NOTICE = "NOTICE"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who answers: the node, this process start (`incarnation`), and the kernel boot."""

    node_id: str
    incarnation: str
    boot_id: str
    started_at: float
    agent_version: str = ""
    restarts: int = 0  # earlier incarnations recorded in the state file


@dataclass(frozen=True, slots=True)
class Application:
    application_id: str
    source: Source
    created_at: float
    revision: int = 0


@dataclass(frozen=True, slots=True)
class Allocation:
    """One BE allocation; `key` is the Workload key (`yarn/<container>`, `k8s/<uid>`, `local/<cgroup>`)."""

    key: str
    application_id: str
    source: Source
    resources: Resources
    phase: Phase
    priority: int = 0
    cgroup: str = ""
    name: str = ""
    namespace: str = ""
    created_at: float = 0.0  # admitted or first seen
    started_at: float = 0.0  # when a source first reported it running; 0 while pending
    scheduler_epoch: int = 0  # epoch of the admitting scheduler; 0 = adopted from a source
    request_id: str = ""
    tags: Tags = ()
    revision: int = 0


class DrainPhase(enum.Enum):
    NONE = "NONE"
    WAIT_ALLOCATIONS = "WAIT_ALLOCATIONS"
    WAIT_APPS = "WAIT_APPS"
    TIMED_OUT = "TIMED_OUT"
    DRAINED = "DRAINED"


@dataclass(frozen=True, slots=True)
class DrainStatus:
    """Decommission progress. `deadline` is absolute wall-clock seconds (None = wait forever)."""

    phase: DrainPhase = DrainPhase.NONE
    graceful: bool = True
    wait_for_apps: bool = False
    started_at: float = 0.0
    deadline: float | None = None
    previous_batch_allocatable: Resources | None = None
    request_id: str = ""
    reason: str = ""
    waiting_applications: tuple[str, ...] = ()
    allocations_left: int = 0  # counted each tick while draining; not persisted (re-derived)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node_id: str
    capacity: Resources = field(default_factory=Resources)
    batch_allocatable: Resources = field(default_factory=Resources)
    lifecycle: Lifecycle = Lifecycle.RECOVERING
    drain: DrainStatus = field(default_factory=DrainStatus)
    highest_epoch: int = 0
    acked_epoch: int = 0
    acked_revision: int = 0
    revision: int = 0


@dataclass(frozen=True, slots=True)
class Notice:
    """Something watchers should hear about that changes no record: an eviction, suppression, a deadline."""

    kind: str
    message: str
    fields: Tags = ()
    at: float = 0.0


LedgerObject = NodeRecord | Application | Allocation | Notice


@dataclass(frozen=True, slots=True)
class Event:
    """One change at one revision; `obj` is the object's state after it (its last state when DELETED)."""

    revision: int
    type: EventType
    obj: LedgerObject
    at: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LedgerView:
    """The whole ledger at exactly one revision; applications first, then allocations (both sorted)."""

    identity: Identity
    revision: int
    oldest_watchable_revision: int
    node: NodeRecord
    applications: tuple[Application, ...]
    allocations: tuple[Allocation, ...]
    taken_at: float

    @property
    def batch_allocated(self) -> Resources:
        total = Resources()
        for a in self.allocations:
            total = total + a.resources
        return total


@dataclass(frozen=True, slots=True)
class AdmitRequest:
    """A new batch allocation a scheduler wants to place here."""

    key: str
    application_id: str
    source: Source
    resources: Resources
    priority: int = 0
    request_id: str = ""
    name: str = ""
    namespace: str = ""
    tags: Tags = ()


class Refusal(enum.Enum):
    NOT_SCHEDULABLE = "NOT_SCHEDULABLE"
    INSUFFICIENT_CPU = "INSUFFICIENT_CPU"
    INSUFFICIENT_MEMORY = "INSUFFICIENT_MEMORY"
    KEY_CONFLICT = "KEY_CONFLICT"
    BUDGET_UNKNOWN = "BUDGET_UNKNOWN"  # a source is stale, or the batch origin is unknown or held


@dataclass(frozen=True, slots=True)
class AdmitResult:
    accepted: bool
    revision: int
    allocation: Allocation | None = None  # the record (new, or the existing one for a repeated key)
    refusal: Refusal | None = None
    message: str = ""
    already_admitted: bool = False
    batch_free: Resources = field(default_factory=Resources)


@dataclass(frozen=True, slots=True)
class AckResult:
    lifecycle: Lifecycle
    revision: int


@dataclass(frozen=True, slots=True)
class Figures:
    """The ledger's numbers under the attribute names the metrics read (`agent.metrics.ledger`)."""

    revision: int
    lifecycle: Lifecycle
    drain_deadline: float | None
    batch_origin: Resources
    k8s_requested: Resources
    yarn_requested: Resources
    allocations: dict[tuple[str, str], int]  # (source, phase) -> count


def figures(view: LedgerView) -> Figures:
    by_source = {s: Resources() for s in Source}
    counts: dict[tuple[str, str], int] = {}
    for a in view.allocations:
        by_source[a.source] = by_source[a.source] + a.resources
        k = (a.source.value, a.phase.value.lower())
        counts[k] = counts.get(k, 0) + 1
    return Figures(view.revision, view.node.lifecycle, view.node.drain.deadline, view.node.batch_allocatable,
                   by_source[Source.K8S], by_source[Source.YARN], counts)
