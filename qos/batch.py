"""One batch ledger for two schedulers: Kubernetes BE pods and YARN containers share `origin_batch_total`.

`origin` comes from the node annotation `node.koordinator.sh/originExtendedAllocatable` or is computed
locally (usage policy: `capacity − safety_margin − max(system_used, reserved) − Σ HP_used`). Other allocators
may hold part of it: their `koord-batch` entries in `node.koordinator.sh/thirdPartyAllocations`, which
koord-manager subtracts (`qos.koord_annotations`). When `k8s_requested + yarn_requested + others > origin` the
node is overcommitted: new batch admissions are refused (`qos.admission`, the one rule, fed this policy's
`BatchState.budget`) and allocations are released, lowest priority first, newest first among equals, until
the ledger fits.
Pure: no I/O, no clock (time is the snapshot's `taken_at`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from qos import koord_annotations, validation, victims
from qos.actions import Action, Evict, EvictReason, Hold, HoldReason
from qos.admission import AdmissionFacts, BatchBudget, admit
from qos.koord_annotations import (
    MAX_MEMORY_BYTES,
    MAX_MILLI_CPU,
    BatchAnnotationError,
    koord_batch_total,
    parse_origin_annotation,
    third_party_allocations,
)
from qos.model import NodeSnapshot, Resources, Source, Workload
from qos.pipeline import Policy

POLICY = "batch_overcommit"
# Koordinator's annotations (their wire format: qos.koord_annotations), importable from here as before.
BATCH_CPU = koord_annotations.BATCH_CPU
BATCH_MEMORY = koord_annotations.BATCH_MEMORY
ORIGIN_ANNOTATION = koord_annotations.ORIGIN_ANNOTATION
THIRD_PARTY_ANNOTATION = koord_annotations.THIRD_PARTY_ANNOTATION
parse_third_party_allocations = koord_annotations.parse_third_party_allocations
third_party_allocations_json = koord_annotations.third_party_allocations_json


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """Batch ledger settings. `origin`: where origin_batch_total comes from.

    `pending_release_s`: a victim already chosen is not chosen again for this long; its release counts as
    pending meanwhile so the ledger never over-evicts while pods terminate.
    """

    origin: Literal["annotation", "local"] = "annotation"
    # local origin: batch CPU = capacity × this percent − max(system used, reserved) − HP used
    cpu_reclaim_threshold_percent: int = validation.bounded(60, 0, 100)
    # local origin: the same for memory
    memory_reclaim_threshold_percent: int = validation.bounded(65, 0, 100)
    # local origin: CPU kept for the system, at least
    reserved_milli_cpu: int = validation.bounded(0, 0, MAX_MILLI_CPU)
    # local origin: memory kept for the system, at least
    reserved_memory_bytes: int = validation.bounded(0, 0, MAX_MEMORY_BYTES)
    # local origin: a new value replaces the one in force when it moved by more than this fraction
    diff_threshold: float = validation.bounded(0.1, 0.0, 1.0)
    # local origin: a new value also replaces the one in force once that is this old
    update_interval_s: float = validation.bounded(300.0, 1.0, 86400.0)
    # release allocations when the node is overcommitted (off: only refuse admissions)
    evict: bool = True
    pending_release_s: float = validation.bounded(60.0, 1.0, 3600.0)
    # A locally computed origin moves with HP usage: one busy second must not evict batch work, so with
    # origin "local" the overcommit has to last this long (admissions are refused at once all the same).
    local_sustain_s: float = validation.bounded(5.0, 0.0, 3600.0)
    # The annotation origin is koord-manager's answer to our NodeMetric. Without a report newer than this
    # (3 report intervals at koordlet's default 60 s), a zero or missing origin is koord-manager's
    # degradation (it resets batch resources to 0), not the node's capacity: held, never acted on.
    origin_report_max_age_s: float = validation.bounded(180.0, 1.0, 86400.0)
    # A zero origin, or a drop by more than this fraction of the origin in force in one step, is acted on
    # only once it has lasted `origin_confirm_s`: 2 report intervals, so koord-manager has recomputed it
    # from at least one more of our reports (it syncs on every NodeMetric change of more than 10 %).
    origin_drop_fraction: float = validation.bounded(0.5, 0.01, 1.0)
    # how long a zero origin, or a drop by more than origin_drop_fraction, must last before it is acted on
    origin_confirm_s: float = validation.bounded(120.0, 0.0, 86400.0)

    def __post_init__(self) -> None:
        validation.check_bounds(self, "batch")
        validation.check_choices(self, "batch")


@dataclass(frozen=True, slots=True)
class BatchState:
    """What the ledger remembers between ticks: the damped origin and the victims whose release is pending."""

    origin: Resources | None = None
    origin_at: float = 0.0
    pending: Mapping[str, tuple[float, Resources]] = field(default_factory=dict)
    blocked: Mapping[str, float] = field(default_factory=dict)  # key -> when its eviction was refused
    over_since: float | None = None  # when the ledger last became overcommitted
    suspect_since: float | None = None  # when a zero or sharply lower annotation origin was first seen
    # This tick's facts for admissions (`budget`): why the origin in force may not be counted on now (None:
    # it may), and what other allocators hold (their koord-batch entries, subtracted by koord-manager).
    held: str | None = None
    others: Resources = field(default_factory=Resources)

    @property
    def budget(self) -> BatchBudget:
        """The batch budget as this policy holds it, for the admission rule (`qos.admission`)."""
        return BatchBudget(self.origin, self.held, self.others)


def note_blocked(state: BatchState, key: str, at: float) -> BatchState:
    """An eviction was refused (a disruption budget, a UID conflict, no cgroup yet): its release is no
    longer pending, and the victim is passed over for `pending_release_s` so the next one is taken."""
    pending = {k: v for k, v in state.pending.items() if k != key}
    return replace(state, pending=pending, blocked={**state.blocked, key: at})


@dataclass(frozen=True, slots=True)
class BatchLedgerView:
    """The ledger at one tick. `overcommit` is how far requests exceed origin (0 where they fit).

    `others`: what other allocators hold of the origin (their `koord-batch` entries in
    `node.koordinator.sh/thirdPartyAllocations`, which koord-manager subtracts from it)."""

    origin: Resources
    k8s_requested: Resources
    yarn_requested: Resources
    others: Resources = field(default_factory=Resources)

    @property
    def requested(self) -> Resources:
        return self.k8s_requested + self.yarn_requested + self.others

    @property
    def overcommit(self) -> Resources:
        over = self.requested - self.origin
        return Resources(max(0, over.milli_cpu), max(0, over.memory_bytes))

    @property
    def overcommitted(self) -> bool:
        o = self.overcommit
        return o.milli_cpu > 0 or o.memory_bytes > 0

    @property
    def free(self) -> Resources:
        f = self.origin - self.requested
        return Resources(max(0, f.milli_cpu), max(0, f.memory_bytes))

    def numbers(self) -> dict[str, float]:
        o = self.overcommit
        return {
            "origin_milli_cpu": self.origin.milli_cpu,
            "origin_memory_bytes": self.origin.memory_bytes,
            "k8s_milli_cpu": self.k8s_requested.milli_cpu,
            "k8s_memory_bytes": self.k8s_requested.memory_bytes,
            "yarn_milli_cpu": self.yarn_requested.milli_cpu,
            "yarn_memory_bytes": self.yarn_requested.memory_bytes,
            "others_milli_cpu": self.others.milli_cpu,
            "others_memory_bytes": self.others.memory_bytes,
            "overcommit_milli_cpu": o.milli_cpu,
            "overcommit_memory_bytes": o.memory_bytes,
        }


# ---------------------------------------------------------------- origin


def local_origin(snapshot: NodeSnapshot, cfg: BatchConfig) -> Resources | None:
    """The usage policy; None when the system usage is not measured (the formula cannot be trusted)."""
    sys_cpu = snapshot.system_usage.milli_cpu
    sys_mem = snapshot.system_usage.memory_working_set_bytes
    if sys_cpu is None or sys_mem is None:
        return None
    hp_cpu = 0.0
    hp_mem = 0
    for w in snapshot.hp_workloads:
        hp_cpu += w.usage.milli_cpu if w.usage.milli_cpu is not None else w.requests.milli_cpu
        ws = w.usage.memory_working_set_bytes
        hp_mem += ws if ws is not None else w.requests.memory_bytes
    cap = snapshot.capacity
    margin_cpu = cap.milli_cpu * (100 - cfg.cpu_reclaim_threshold_percent) / 100
    margin_mem = cap.memory_bytes * (100 - cfg.memory_reclaim_threshold_percent) / 100
    cpu = cap.milli_cpu - margin_cpu - max(sys_cpu, cfg.reserved_milli_cpu) - hp_cpu
    mem = cap.memory_bytes - margin_mem - max(sys_mem, cfg.reserved_memory_bytes) - hp_mem
    return Resources(max(0, int(cpu)), max(0, int(mem)))


def damp(prev: Resources | None, prev_at: float, new: Resources, now: float,
         cfg: BatchConfig) -> tuple[Resources, float]:
    """Keep `prev` unless a dimension moved by more than diff_threshold or it is older than the interval."""
    if prev is None or now - prev_at >= cfg.update_interval_s:
        return new, now

    def moved(old: int, cur: int) -> bool:
        if old == 0:
            return cur != 0
        return abs(cur - old) / old > cfg.diff_threshold

    if moved(prev.milli_cpu, new.milli_cpu) or moved(prev.memory_bytes, new.memory_bytes):
        return new, now
    return prev, prev_at


def report_fresh(snapshot: NodeSnapshot, cfg: BatchConfig) -> bool:
    """Whether our usage report (NodeMetric) is recent enough for koord-manager's origin to mean something."""
    age = snapshot.usage_report_age_s
    return age is not None and 0 <= age <= cfg.origin_report_max_age_s


def dropped(prev: Resources | None, new: Resources, fraction: float) -> bool:
    """Whether a dimension fell by more than `fraction` of its previous value."""
    if prev is None:
        return False
    return any(old > 0 and (old - cur) / old > fraction
               for old, cur in ((prev.milli_cpu, new.milli_cpu), (prev.memory_bytes, new.memory_bytes)))


def _annotation_origin(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState,
                       annotation: str | None) -> tuple[Resources | None, BatchState, str | None]:
    """The annotation origin in force, the new state, and why it is held (None: not held).

    A held origin that has a predecessor keeps the predecessor in force; a collapsed one (zero or missing
    while our report is missing or stale) forbids acting at all."""
    fresh = report_fresh(snapshot, cfg)
    age = snapshot.usage_report_age_s
    report = "no usage report (NodeMetric) written yet" if age is None else f"usage report is {age:.0f}s old"
    if annotation is None:
        if not fresh and state.origin is not None:
            return None, replace(state, suspect_since=None), f"origin annotation gone and {report}"
        return state.origin, state, None  # keep the last origin read (None, "unknown", until the first)
    parsed = parse_origin_annotation(annotation)
    collapsed = parsed.milli_cpu == 0 and parsed.memory_bytes == 0
    if collapsed and not fresh:
        return None, replace(state, suspect_since=None), (
            f"origin collapsed to 0 and {report}: koord-manager's degraded value, not capacity")
    if not (collapsed or dropped(state.origin, parsed, cfg.origin_drop_fraction)):
        return parsed, replace(state, origin=parsed, origin_at=snapshot.taken_at, suspect_since=None), None
    since = snapshot.taken_at if state.suspect_since is None else state.suspect_since
    waited = snapshot.taken_at - since
    if waited < cfg.origin_confirm_s:
        what = "origin is 0" if collapsed else (
            f"origin dropped to {parsed.milli_cpu}m / {parsed.memory_bytes} B by more than "
            f"{cfg.origin_drop_fraction:.0%}")
        return state.origin, replace(state, suspect_since=since), (
            f"{what}; confirming for {waited:.0f}s of {cfg.origin_confirm_s:g}s")
    return parsed, replace(state, origin=parsed, origin_at=snapshot.taken_at, suspect_since=None), None


def origin_batch_total(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState,
                       annotation: str | None = None) -> tuple[Resources | None, BatchState]:
    """The origin in force and the updated state. Raises BatchAnnotationError on a malformed annotation."""
    if cfg.origin == "annotation":
        origin, state, _ = _annotation_origin(snapshot, cfg, state, annotation)
        return origin, state
    computed = local_origin(snapshot, cfg)
    if computed is None:
        return state.origin, state
    value, at = damp(state.origin, state.origin_at, computed, snapshot.taken_at, cfg)
    return value, replace(state, origin=value, origin_at=at)


# ---------------------------------------------------------------- ledger


def _requested(workloads: Iterable[Workload], source: Source) -> Resources:
    # Summed as ints: a Resources per workload was most of this, and it runs twice a tick over every workload.
    cpu = mem = 0
    for w in workloads:
        if w.be and w.source is source:
            cpu += w.requests.milli_cpu
            mem += w.requests.memory_bytes
    return Resources(cpu, mem)


def k8s_requested(workloads: Iterable[Workload]) -> Resources:
    """Σ requests of BE pods (terminating ones too: they hold their allocation until gone)."""
    return _requested(workloads, Source.K8S)


def holds_allocation(w: Workload) -> bool:
    """Whether a BE workload still holds its allocation. A terminating pod does until it is gone; a YARN
    container the NodeManager reports dying (the source marks it terminating with its requests zeroed)
    does not, though its cgroup's usage is still usage. A live container whose kill is in flight keeps
    its requests, and so its allocation, until the NodeManager reports it dying."""
    return not (w.source is Source.YARN and w.terminating and w.requests == Resources())


def yarn_requested(workloads: Iterable[Workload]) -> Resources:
    """Σ allocated vcores×1000 / MiB of live YARN containers (the source zeroes the dying ones')."""
    return _requested(workloads, Source.YARN)


def ledger_view(origin: Resources, workloads: Iterable[Workload],
                others: Resources | None = None) -> BatchLedgerView:
    ws = tuple(workloads)
    return BatchLedgerView(origin, k8s_requested(ws), yarn_requested(ws), others or Resources())


def other_allocations(snapshot: NodeSnapshot, yarn_entries: Collection[str] = ()) -> Resources:
    """What other allocators hold: the `koord-batch` entries of the snapshot's `thirdPartyAllocations`
    (koord-manager subtracts every one from the origin), except `yarn_entries`, the entries that report the
    YARN this agent counts itself from its NodeManager (its own and koord-yarn-operator's). Raises
    BatchAnnotationError for a value koord-manager cannot read either, or an entry that cannot be counted."""
    if snapshot.third_party_annotation is None:
        return Resources()
    return koord_batch_total(third_party_allocations(snapshot.third_party_annotation), yarn_entries)


def _origin(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState,
            yarn_entries: Collection[str]) -> tuple[Resources | None, BatchState, list[Action]]:
    """The origin in force (None: do not act), the state with this tick's admission facts (why the origin
    is held, what other allocators hold), and a Hold saying why it is held or unknown."""
    held: str | None = None
    try:
        if cfg.origin == "annotation":
            origin, state, held = _annotation_origin(snapshot, cfg, state, snapshot.origin_annotation)
        else:
            origin, state = origin_batch_total(snapshot, cfg, state)
    except BatchAnnotationError as err:
        why = f"origin unusable: {err}"
        return None, replace(state, held=why), [Hold(POLICY, HoldReason.ORIGIN_UNUSABLE, why)]
    holds: list[Action] = [Hold(POLICY, HoldReason.ORIGIN_HELD, f"origin held: {held}")] if held else []
    try:
        others = other_allocations(snapshot, yarn_entries)
    except BatchAnnotationError as err:
        # koord-manager cannot read it either. The room left is not known (admissions refused), but what
        # this node's schedulers hold is: an overcommit without the others' share is certain, and released.
        others, held = Resources(), f"other allocators' holdings unusable: {err}"
        holds.append(Hold(POLICY, HoldReason.OTHERS_UNUSABLE, held))
    state = replace(state, held=held, others=others)
    if origin is None and not holds:
        holds = [Hold(POLICY, HoldReason.ORIGIN_UNKNOWN, "origin unknown")]
    return origin, state, holds


def _forget_expired(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState) -> BatchState:
    """Pending and blocked victims that are gone, or older than `pending_release_s`, are forgotten."""
    now = snapshot.taken_at
    present = {w.key for w in snapshot.workloads}
    pending = {k: v for k, v in state.pending.items()
               if k in present and now - v[0] < cfg.pending_release_s}
    blocked = {k: at for k, at in state.blocked.items() if k in present and now - at < cfg.pending_release_s}
    return replace(state, pending=pending, blocked=blocked)


def _hold_back(snapshot: NodeSnapshot, cfg: BatchConfig, since: float) -> Hold | None:
    """Why an overcommitted ledger may not release anything this tick, if it may not."""
    waited = snapshot.taken_at - since
    if cfg.origin == "local" and waited < cfg.local_sustain_s:
        return Hold(POLICY, HoldReason.SUSTAIN, f"overcommitted for {waited:.1f}s; releasing after "
                                                f"{cfg.local_sustain_s:g}s (local origin follows HP usage)")
    if snapshot.stale:
        which = ", ".join(f"{k}: {v}" for k, v in sorted(snapshot.stale.items()))
        return Hold(POLICY, HoldReason.STALE_DATA, f"overcommitted but data is stale ({which})")
    if not cfg.evict:
        return Hold(POLICY, HoldReason.EVICTION_DISABLED,
                    "overcommitted; eviction disabled, admissions refused")
    return None


def _releasing(snapshot: NodeSnapshot, state: BatchState) -> Resources:
    """What is already on its way back: pending victims still holding their allocation, and terminating
    batch workloads."""
    releasing = Resources()
    for w in snapshot.workloads:
        if w.key in state.pending:
            # A victim that no longer holds its allocation is already out of the requested totals.
            if holds_allocation(w):
                releasing = releasing + state.pending[w.key][1]
        elif w.terminating and w.be and w.source in (Source.K8S, Source.YARN):
            releasing = releasing + w.requests
    return releasing


def _evictions(victims: list[Workload], view: BatchLedgerView, releasing: Resources,
               origin: Resources) -> list[Action]:
    numbers = view.numbers()
    numbers["pending_release_milli_cpu"] = releasing.milli_cpu
    numbers["pending_release_memory_bytes"] = releasing.memory_bytes
    over = view.overcommit
    others = f" + other allocators {view.others.milli_cpu}m" if view.others != Resources() else ""
    msg_head = (f"batch overcommitted by {over.milli_cpu}m CPU / {over.memory_bytes} B memory: "
                f"k8s {view.k8s_requested.milli_cpu}m + yarn {view.yarn_requested.milli_cpu}m{others} "
                f"> origin {origin.milli_cpu}m")
    return [Evict(
        key=v.key, reason=EvictReason.BATCH_OVERCOMMIT,
        message=f"{msg_head}; releasing {v.requests.milli_cpu}m / {v.requests.memory_bytes} B",
        release_milli_cpu=v.requests.milli_cpu, release_memory_bytes=v.requests.memory_bytes,
        numbers=numbers) for v in victims]


def decide_batch(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState,
                 yarn_entries: Collection[str] = ()) -> tuple[list[Action], BatchState]:
    """Release allocations until `k8s + yarn + other allocators ≤ origin`; hold (with the reason) when it
    may not act. `yarn_entries`: see `other_allocations`. When the admission rule refuses and nothing else
    this returns says why (stale data, the ledger within budget), a Hold says admissions are refused."""
    origin, state, holds = _origin(snapshot, cfg, state, yarn_entries)
    if origin is None:
        return holds, state
    actions, state = _ledger_actions(snapshot, cfg, state, origin)
    actions = holds + actions
    if not actions:
        held = k8s_requested(snapshot.workloads) + yarn_requested(snapshot.workloads)
        gate = admit(Resources(), AdmissionFacts(state.budget, held, snapshot.stale))
        if not gate.accepted:  # holds are counted by reason: the sources' reasons carry ages, names do not
            why = f"stale data from {', '.join(sorted(snapshot.stale))}" if snapshot.stale else gate.reason
            actions.append(Hold(POLICY, HoldReason.ADMISSIONS_REFUSED, f"admissions refused: {why}"))
    return actions, state


def _ledger_actions(snapshot: NodeSnapshot, cfg: BatchConfig, state: BatchState,
                    origin: Resources) -> tuple[list[Action], BatchState]:
    """Release allocations until `k8s + yarn ≤ origin` (the origin in force)."""
    state = _forget_expired(snapshot, cfg, state)
    view = ledger_view(origin, snapshot.workloads, state.others)
    if not view.overcommitted:
        return [], replace(state, over_since=None)
    since = snapshot.taken_at if state.over_since is None else state.over_since
    state = replace(state, over_since=since)
    hold = _hold_back(snapshot, cfg, since)
    if hold is not None:
        return [hold], state
    releasing = _releasing(snapshot, state)
    over = view.overcommit
    need = Resources(max(0, over.milli_cpu - releasing.milli_cpu),
                     max(0, over.memory_bytes - releasing.memory_bytes))
    if need.milli_cpu <= 0 and need.memory_bytes <= 0:
        return [Hold(POLICY, HoldReason.PENDING_RELEASES,
                     "overcommitted; waiting for pending releases")], state
    candidates = [w for w in snapshot.workloads
                  if w.be and w.source in (Source.K8S, Source.YARN) and not w.terminating
                  and w.key not in state.pending and w.key not in state.blocked]
    chosen = victims.pick_allocations(candidates, need, snapshot.workloads)
    actions = _evictions(chosen, view, releasing, origin)
    got = sum((v.requests for v in chosen), Resources())
    if got.milli_cpu < need.milli_cpu or got.memory_bytes < need.memory_bytes:
        actions.append(Hold(POLICY, HoldReason.NOT_ENOUGH_VICTIMS,
                            "not enough evictable batch allocations to fit the ledger"))
    new_pending = {**state.pending, **{v.key: (snapshot.taken_at, v.requests) for v in chosen}}
    return actions, replace(state, pending=new_pending)


@dataclass(frozen=True, slots=True)
class BatchPolicy(Policy[BatchState]):
    """Batch overcommit behind the pipeline protocol. It keeps its own pending victims (their requests,
    for `pending_release_s`) and is de-duplicated against the others when the actions are merged."""

    config: BatchConfig = field(default_factory=lambda: BatchConfig(origin="local"))
    name: str = POLICY
    # The thirdPartyAllocations entries that report the YARN the agent counts itself (see other_allocations).
    yarn_entries: tuple[str, ...] = ()

    def initial_state(self) -> BatchState:
        return BatchState()

    def decide(self, snapshot: NodeSnapshot, state: BatchState,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], BatchState]:
        return decide_batch(snapshot, self.config, state, self.yarn_entries)

    def refused(self, state: BatchState, key: str, at: float) -> BatchState:
        return note_blocked(state, key, at)
