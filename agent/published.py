"""What the loop publishes after every tick: one immutable object, swapped in atomically.

Readers on other threads (the metrics server) and other tasks (gRPC, `top`) only ever see a whole
`Published`; they never touch the loop's working state.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from qos.actions import Action, HoldReason
from qos.model import NodeSnapshot


class Outcome(enum.StrEnum):
    """What became of an action."""

    APPLIED = "applied"  # a knob was written
    DRY_RUN = "dry_run"  # recorded only
    SKIPPED = "skipped"  # an executor guard held it back (stale data, rate limit, cool-down, ...)
    PROTECTED = "protected"  # a policy named a protected workload: refused, and counted
    STARTED = "started"  # an eviction is under way
    DONE = "done"  # an eviction finished
    FAILED = "failed"  # a knob write or an eviction failed


NOT_DONE = frozenset({Outcome.SKIPPED, Outcome.FAILED, Outcome.PROTECTED})
"""Outcomes of an eviction that did not happen at this tick."""


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action as it was carried out (or not): what the audit log and `top` show."""

    at: float
    policy: str
    kind: str  # an ActionKind, or the action's type name when a knob write failed
    target: str
    outcome: Outcome
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KnobOverride:
    """A knob the agent holds, found changed by another writer and re-asserted (docs/coexistence.md)."""

    at: float  # wall clock of the re-assert
    knob: str  # cpuset | cpu_quota | memory_limit | ...
    cgroup: str  # relative to the agent's root
    writer: str  # systemd | unknown
    found: str
    wanted: str
    off_for_s: float | None  # how long it was off at most: since a tick last read it right (None: unknown)


@dataclass(frozen=True, slots=True)
class Counters:
    """Monotonic counts since the process started; label tuples are low-cardinality enums."""

    ticks: int = 0
    tick_errors: int = 0
    evictions: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (reason, source) -> n
    eviction_failures: Mapping[str, int] = field(default_factory=dict)  # reason -> n
    holds: Mapping[tuple[str, HoldReason], int] = field(default_factory=dict)  # (policy, code) -> n
    admissions_refused: Mapping[str, int] = field(default_factory=dict)  # reason -> n
    cgroup_writes: int = 0
    cgroup_write_errors: int = 0
    knob_overrides: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (knob, writer) -> n
    systemd_sets: int = 0  # knobs also set as systemd unit properties
    systemd_errors: int = 0  # systemd calls that failed (the file alone was written)
    journal_writes: int = 0  # the journal of holdings replaced (cgroups/holdings.py): 0 at a steady tick
    holdings: Mapping[str, int] = field(default_factory=dict)  # holder -> holdings now (a gauge)
    given_back: Mapping[str, int] = field(default_factory=dict)  # holder -> an earlier run's, given back
    left_to_others: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (knob, writer) -> n


@dataclass(frozen=True, slots=True)
class Published:
    """The agent's state after one tick."""

    tick: int
    tick_started_at: float  # wall clock
    tick_monotonic: float  # time.monotonic() at tick start: health checks compare against it
    tick_duration_s: float
    collect_duration_s: float
    interval_s: float
    snapshot: NodeSnapshot | None
    be_cpu_granted_milli: int | None  # what suppression currently lets BE use
    be_cpu_policy: str
    recent_actions: tuple[ActionRecord, ...] = ()  # the latest few, for `status` and `top`
    actions: tuple[ActionRecord, ...] = ()  # every record of this tick (and the evictions ended before it)
    pending_actions: tuple[Action, ...] = ()
    source_age_s: Mapping[str, float] = field(default_factory=dict)
    sources_synced: bool = False
    dry_run: bool = False
    counters: Counters = Counters()
    knob_overrides: tuple[KnobOverride, ...] = ()  # the latest few, oldest first
    be_cpu_floor_milli: int | None = None  # the least suppression will leave BE (for "suppressed to floor")
    settings_sources: Mapping[str, str] = field(default_factory=dict)  # setting -> default | yaml | NodeSLO
    fast_path_mode: str = ""  # "psi-trigger" | "adaptive-poll" | "off" (agent/daemon/psi_wake.py)
    fast_path_reason: str = ""  # why it polls or is off instead of taking PSI triggers; "" when it takes them


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source as status and /readyz show it. `age_s` None: no good answer yet, or no age kept."""

    name: str
    age_s: float | None
    stale: bool
    reason: str  # why its data cannot be trusted; "" when fresh


def source_states(pub: Published, now_monotonic: float) -> tuple[SourceState, ...]:
    """Every source of the tick (and every stale part of the snapshot, e.g. "cgroups"), sorted by name.
    Ages were taken at the tick and are brought forward to `now_monotonic` (the clock of tick_monotonic)."""
    stale = dict(pub.snapshot.stale) if pub.snapshot is not None else {}
    since_tick = max(0.0, now_monotonic - pub.tick_monotonic)
    out = []
    for name in sorted(set(pub.source_age_s) | set(stale)):
        age = pub.source_age_s.get(name)
        now_age = age + since_tick if age is not None and math.isfinite(age) else None
        out.append(SourceState(name, now_age, name in stale, stale.get(name, "")))
    return tuple(out)


class Board:
    """Holds the latest `Published`; the loop sets it, anyone reads it. Assignment is atomic in CPython,
    the lock only orders writers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Published | None = None

    def publish(self, value: Published) -> None:
        with self._lock:
            self._current = value

    def get(self) -> Published | None:
        return self._current
