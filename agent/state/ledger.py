"""The state ledger: the one place that holds the node's applications, allocations and node record.

Mutated only from the event loop thread (the tick loop's `sync`, the API's `admit` / `ack_recovery`).
Every change bumps one revision and appends one event to a bounded ring; watchers get events through a
bounded queue each. What cannot be re-derived from the sources is persisted (`agent.state.persist`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from agent import __version__
from agent.state import lifecycle
from agent.state.errors import InvalidRequest, RevisionAhead, StaleEpoch, StateFileError
from agent.state.lifecycle import Trigger
from agent.state.persist import IncarnationRecord, PersistedState, StateStore
from agent.state.records import (
    AckResult,
    AdmitRequest,
    AdmitResult,
    Allocation,
    Application,
    DrainStatus,
    Event,
    EventType,
    Identity,
    LedgerObject,
    LedgerView,
    Lifecycle,
    NodeRecord,
    Notice,
    Phase,
    Refusal,
)
from agent.state.ring import EventRing, Subscription
from agent.state.validate import check_admit, check_epoch
from agent.state.writer import StateWriter
from cgroups.holdings import read_boot_id
from qos import admission
from qos.admission import AdmissionFacts, BatchBudget
from qos.batch import holds_allocation
from qos.model import NodeSnapshot, Resources, Source, Workload

log = logging.getLogger("coloc.state")

WAKE_SLICE = 32  # watchers woken per event-loop pass: a due tick waits behind at most this many writes
_SOURCE_NAMES = {s.value: s for s in Source}


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    """`state_path` None keeps nothing on disk (only for tools and tests that want a throwaway ledger).
    `await_scheduler_ack` False: no central scheduler is configured, so a new incarnation starts
    SCHEDULABLE instead of RECOVERING (see `agent.state.lifecycle.on_start`)."""

    node_id: str
    state_path: str | None = "/var/lib/coloc-agent/state.json"
    ring_size: int = 4096
    watch_queue_size: int = 1024
    pending_launch_ttl_s: float = 300.0
    incarnation_history: int = 16
    request_id_history: int = 256
    agent_version: str = __version__
    await_scheduler_ack: bool = True
    # Epochs are bounded by the wall clock: no epoch above now (in ms, as `coloc-agent recover` uses) plus
    # this skew is taken, however many calls try. A per-call step would bound one call only; this bounds
    # the rise itself, and a counter epoch (1, 2, ...) is far below any clock and unaffected.
    epoch_clock_skew_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.node_id or len(self.node_id) > 253:
            raise ValueError(f"node_id: must be 1-253 characters, got {self.node_id!r}")
        if self.ring_size < 16:
            raise ValueError(f"ring_size: must be ≥ 16, got {self.ring_size}")
        if self.watch_queue_size < 16:
            raise ValueError(f"watch_queue_size: must be ≥ 16, got {self.watch_queue_size}")
        if self.pending_launch_ttl_s <= 0:
            raise ValueError(f"pending_launch_ttl_s: must be > 0, got {self.pending_launch_ttl_s}")
        if not 0 <= self.epoch_clock_skew_s <= 86_400:
            raise ValueError(f"epoch_clock_skew_s: must be in [0, 86400], got {self.epoch_clock_skew_s}")


class Ledger:
    def __init__(self, cfg: LedgerConfig, *, persisted: PersistedState | None = None,
                 store: StateStore | None = None, boot_id: str | None = None, incarnation: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self._clock = clock
        now = clock()
        prior = persisted or PersistedState(node_id=cfg.node_id)
        boot = read_boot_id() if boot_id is None else boot_id
        inc = IncarnationRecord(incarnation or str(uuid.uuid4()), boot, now)
        self._incarnations = (*prior.incarnations, inc)[-cfg.incarnation_history:]
        self._request_ids = prior.request_ids[-cfg.request_id_history:]
        self.identity = Identity(cfg.node_id, inc.incarnation, inc.boot_id, now, cfg.agent_version,
                                 restarts=len(prior.incarnations))
        self._rev = 0
        self._ring = EventRing(cfg.ring_size)
        self._subs: set[Subscription] = set()
        self._to_wake: deque[Subscription] = deque()
        self._apps: dict[str, Application] = {}
        self._allocs: dict[str, Allocation] = {}
        # The keys of _apps and _allocs in order, kept until one is added or removed: a view is built at every
        # change, and sorting a thousand keys each time was a third of a tick's ledger work.
        self._order: tuple[list[str], list[str]] | None = None
        # A memo of the sync's comparison, not state: per key, the allocation a workload was last compared
        # with and the workload's fields that comparison reads. While both are the same (the allocation by
        # identity: any change replaces it), so is the answer "unchanged"; it was 70 % of a sync at 1,000.
        self._compared: dict[str, tuple[Allocation, tuple[object, ...]]] = {}
        self._members: dict[str, set[str]] = {}
        self._allocated = Resources()
        # The admission rule's facts as of the last sync: the batch policy's budget, the stale sources.
        self._budget = BatchBudget(held="no tick has run yet")
        self._stale: Mapping[str, str] = {}
        self._view: LedgerView | None = None
        self._made: list[Event] | None = None  # events of the sync in progress
        self._store = store
        self._writer: StateWriter | None = None
        self._dirty = 1  # the new incarnation itself must be written
        self._saved = 0
        self.refusals: Counter[str] = Counter()
        # The admissions judged since the trace last took them (request, facts, verdict): bounded, read only
        # by the trace's recorder (agent/trace), which replays them against another budget.
        self.judged: deque[tuple[Resources, AdmissionFacts, admission.Admission]] = deque(maxlen=256)
        self.dropped_watchers = 0
        self.startup_problem: str | None = None
        start = lifecycle.on_start(prior.lifecycle, await_ack=cfg.await_scheduler_ack)
        self._node = NodeRecord(cfg.node_id, lifecycle=start,
                                drain=prior.drain, highest_epoch=prior.highest_epoch)
        for a in prior.pending_launches:
            self._add_alloc(a, now, "restored")

    # ---- construction with persistence -----------------------------------------------------------------

    @classmethod
    def open(cls, cfg: LedgerConfig, *, boot_id: str | None = None, incarnation: str | None = None,
             clock: Callable[[], float] = time.time) -> Ledger:
        """Load the state file (a corrupt one is reported and set aside), start a new incarnation and
        write it before returning, so the agent never serves a state it could lose."""
        store = StateStore(cfg.state_path) if cfg.state_path else None
        result = store.load(cfg.node_id) if store else None
        ledger = cls(cfg, persisted=result.state if result else None, store=store, boot_id=boot_id,
                     incarnation=incarnation, clock=clock)
        if result is not None and result.problem:
            ledger.startup_problem = result.problem
            ledger.notice("state_file", result.problem,
                          {"set_aside": str(result.set_aside.name) if result.set_aside else ""})
        ledger.save()
        return ledger

    # ---- reading --------------------------------------------------------------------------------------

    def now(self) -> float:
        """The ledger's clock (wall-clock seconds): drain deadlines are set and compared on it."""
        return self._clock()

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def node(self) -> NodeRecord:
        return self._node

    @property
    def oldest_watchable_revision(self) -> int:
        return self._ring.oldest_watchable(self._rev)

    @property
    def batch_allocated(self) -> Resources:
        return self._allocated

    @property
    def watcher_count(self) -> int:
        return len(self._subs)

    @property
    def last_view(self) -> LedgerView | None:
        """The newest view built so far (refreshed by every `sync`); safe to read from any thread."""
        return self._view

    def view(self) -> LedgerView:
        """An immutable picture at the current revision (cached until the next change)."""
        if self._view is None or self._view.revision != self._rev:
            if self._order is None:
                self._order = sorted(self._apps), sorted(self._allocs)
            apps, allocs = self._order
            self._view = LedgerView(
                identity=self.identity, revision=self._rev,
                oldest_watchable_revision=self._ring.oldest_watchable(self._rev), node=self._node,
                applications=tuple(map(self._apps.__getitem__, apps)),
                allocations=tuple(map(self._allocs.__getitem__, allocs)),
                taken_at=self._clock(),
            )
        return self._view

    def allocation(self, key: str) -> Allocation | None:
        return self._allocs.get(key)

    def events_after(self, revision: int) -> list[Event]:
        if revision > self._rev:
            raise RevisionAhead("from_revision", revision, self._rev)
        return self._ring.after(revision, self._rev)

    def recent_events(self, n: int) -> list[Event]:
        return self._ring.last(n)

    # ---- watchers -------------------------------------------------------------------------------------

    def subscribe(self, from_revision: int | None = None, queue_size: int | None = None, *,
                  on_drop: Callable[[Subscription], None] | None = None) -> Subscription:
        """Events after `from_revision` (None: from now on). Raises RevisionGone / RevisionAhead. `on_drop`
        is called with the subscription once the ledger cuts it off (`Subscription`).

        Backlog and registration happen in one step of the event loop, so nothing falls in between."""
        backlog = [] if from_revision is None else self.events_after(from_revision)
        sub = Subscription(backlog, queue_size or self.cfg.watch_queue_size, on_drop)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.closed = True
        self._subs.discard(sub)

    # ---- the tick ------------------------------------------------------------------------------------

    def sync(self, snapshot: NodeSnapshot, budget: BatchBudget | Resources, now: float) -> list[Event]:
        """Bring allocations in line with the snapshot's BE workloads; returns the events it made.

        `budget`: the batch policy's (origin in force, why it is held, what other allocators hold); the node
        reports `origin − others` as its batch allocatable (the last one reported while the origin is
        unknown). A bare Resources is an origin known and in force, with no other allocator. The budget and
        the snapshot's stale sources are what the next admissions are judged on.
        A source marked stale in the snapshot keeps its allocations (and pending launches) as they are:
        missing data is not an empty node."""
        if isinstance(budget, Resources):
            budget = BatchBudget(budget)
        self._budget = budget
        self._stale = dict(snapshot.stale)
        made: list[Event] = []
        self._made = made
        try:
            allocatable = budget.allocatable
            self._sync(snapshot, self._node.batch_allocatable if allocatable is None else allocatable, now)
        finally:
            self._made = None
        self.view()
        return made

    def _sync(self, snapshot: NodeSnapshot, batch_allocatable: Resources, now: float) -> None:
        batch = batch_allocatable if lifecycle.reports_batch(self._node.lifecycle) else Resources()
        if self._node.capacity != snapshot.capacity or self._node.batch_allocatable != batch:
            self._set_node(replace(self._node, capacity=snapshot.capacity, batch_allocatable=batch), now)
        held = _held_sources(snapshot.stale)
        be = [w for w in snapshot.workloads if w.be]
        finished = {w.key for w in be if w.terminating and not holds_allocation(w)}
        seen = self._sync_present(be, finished, now)
        ttl = self.cfg.pending_launch_ttl_s
        for key in sorted(self._allocs.keys() - seen):
            a = self._allocs[key]
            if held is None or a.source in held:
                continue
            if key in finished:  # a dying YARN container: its cgroup may linger, its allocation does not
                self._remove_alloc(key, now, "finished")
            elif a.phase is Phase.PENDING_LAUNCH:
                if now - a.created_at > ttl:
                    self._remove_alloc(key, now, "launch_expired")
            else:
                self._remove_alloc(key, now, "gone")

    def _sync_present(self, be: list[Workload], finished: set[str], now: float) -> set[str]:
        """Add or update the allocation of each BE workload reported (the first of a key); the keys seen."""
        seen: set[str] = set()
        allocs, compared = self._allocs, self._compared
        for w in be:
            key = w.key
            if key in seen or key in finished:
                continue
            seen.add(key)
            cur = allocs.get(key)
            req = w.requests
            fields = (w.terminating, req.milli_cpu, req.memory_bytes, w.app_id, w.priority, w.cgroup, w.name)
            if cur is None:
                self._add_alloc(_from_workload(w, now), now, "")
            else:
                last = compared.get(key)
                if last is not None and last[0] is cur and last[1] == fields:
                    continue
                new = _updated(cur, w, now)
                if new is not None:
                    self._change_alloc(cur, new, now)
            now_held = allocs.get(key)
            if now_held is not None:
                compared[key] = (now_held, fields)
        return seen

    # ---- scheduler calls -----------------------------------------------------------------------------

    def check_epoch(self, epoch: int) -> None:
        """Fence: a lower epoch than already seen raises StaleEpoch; a higher one up to the clock bound (else
        InvalidRequest) is written to the epoch file, then recorded."""
        self._fence(epoch)
        highest = self._node.highest_epoch
        if epoch <= highest:
            return
        skew = self.cfg.epoch_clock_skew_s
        limit = int((self._clock() + skew) * 1000)
        if epoch > limit:
            raise InvalidRequest("fence.scheduler_epoch",
                                 f"{epoch} is in the future: epochs may be at most the current time in ms "
                                 f"+ {skew:g} s ({limit})")
        if self._store is not None:
            self._store.write_epoch(self.cfg.node_id, epoch)
        self._set_node(replace(self._node, highest_epoch=epoch), self._clock())
        self._mark_dirty()

    def _fence(self, epoch: int) -> None:
        check_epoch(epoch)
        if epoch < self._node.highest_epoch:
            raise StaleEpoch(epoch, self._node.highest_epoch)

    def admit(self, request: AdmitRequest, epoch: int) -> AdmitResult:
        """Arbitrate a new batch allocation against the ledger; accepted ones are PENDING_LAUNCH until a
        source reports them. Idempotent on the key. Raises InvalidRequest / StaleEpoch."""
        check_epoch(epoch)
        check_admit(request)
        self.check_epoch(epoch)
        existing = self._allocs.get(request.key)
        if existing is not None:
            # The same launch again (a retry, or a scheduler replaying its intents): the existing record,
            # whose resources are what the node accounts, is the answer.
            if existing.application_id == request.application_id:
                return AdmitResult(True, self._rev, existing, already_admitted=True, batch_free=self._free())
            return self._refuse(Refusal.KEY_CONFLICT,
                                f"key {request.key} is already held by application {existing.application_id} "
                                f"({_fmt(existing.resources)})", existing)
        facts = self.admission_facts()
        verdict = admission.admit(request.resources, facts)
        self.judged.append((request.resources, facts, verdict))
        if not verdict.accepted:
            if verdict.refusal is None or verdict.refusal is admission.Refusal.INVALID:
                raise InvalidRequest("allocation.resources", verdict.reason)
            return self._refuse(_REFUSALS[verdict.refusal], verdict.reason)
        now = self._clock()
        alloc = Allocation(
            key=request.key, application_id=request.application_id, source=request.source,
            resources=request.resources, phase=Phase.PENDING_LAUNCH, priority=request.priority,
            name=request.name, namespace=request.namespace, created_at=now, scheduler_epoch=epoch,
            request_id=request.request_id, tags=request.tags,
        )
        self._add_alloc(alloc, now, "admitted")
        return AdmitResult(True, self._rev, self._allocs[request.key], batch_free=self._free())

    def take_judged(self) -> list[tuple[Resources, AdmissionFacts, admission.Admission]]:
        """The admissions judged since the last call, oldest first (the trace's)."""
        out = list(self.judged)
        self.judged.clear()
        return out

    def admission_facts(self) -> AdmissionFacts:
        """What the admission rule (`qos.admission`) judges a new allocation on: the batch budget and the
        stale sources as of the last sync, what this node's schedulers hold now (launches not yet seen
        included), and whether the lifecycle takes new work."""
        closed = None
        if not lifecycle.admits(self._node.lifecycle):
            why = ("no scheduler has acknowledged this agent's state yet (AckRecovery)"
                   if self._node.lifecycle is Lifecycle.RECOVERING else "it is not accepting new work")
            closed = f"node is {self._node.lifecycle.value}: {why}"
        return AdmissionFacts(self._budget, self._allocated, self._stale, closed)

    def ack_recovery(self, epoch: int, applied_revision: int) -> AckResult:
        """A scheduler applied this incarnation's state up to `applied_revision`: RECOVERING → SCHEDULABLE."""
        self._fence(epoch)
        if not 0 <= applied_revision <= self._rev:
            raise RevisionAhead("applied_revision", applied_revision, self._rev)
        self.check_epoch(epoch)
        state = lifecycle.next_state(self._node.lifecycle, Trigger.ACK_RECOVERY)
        new = replace(self._node, lifecycle=state, acked_epoch=epoch, acked_revision=applied_revision)
        if new != self._node:
            if state is not self._node.lifecycle:
                self._mark_dirty()
            self._set_node(new, self._clock(), "ack_recovery")
        return AckResult(state, self._rev)

    def transition(self, trigger: Trigger, epoch: int | None, *, drain: DrainStatus | None = None,
                   request_id: str = "", batch_allocatable: Resources | None = None) -> list[Event]:
        """Move the lifecycle (and drain status) by `trigger`; the one entry for decommission work.

        A state that offers no batch capacity reports zero at once; `batch_allocatable` (a recommission's
        recorded value) is reported at once by one that does. Raises StaleEpoch or LifecycleError before
        changing anything. `epoch` None is the agent itself (a drain finishing), which no scheduler fences."""
        if epoch is not None:
            self._fence(epoch)
        state = lifecycle.next_state(self._node.lifecycle, trigger)
        if epoch is not None:
            self.check_epoch(epoch)
        batch = self._node.batch_allocatable
        if not lifecycle.reports_batch(state):
            batch = Resources()
        elif batch_allocatable is not None:
            batch = batch_allocatable
        new = replace(self._node, lifecycle=state, drain=self._node.drain if drain is None else drain,
                      batch_allocatable=batch)
        if request_id:
            self._request_ids = (*self._request_ids, request_id)[-self.cfg.request_id_history:]
            self._mark_dirty()
        if new == self._node:
            return []
        self._set_node(new, self._clock(), trigger.value.lower())
        self._mark_dirty()
        return self._ring.last(1)

    def update_drain(self, drain: DrainStatus, reason: str = "drain_progress") -> list[Event]:
        """Record drain progress (phase, allocations left, waiting applications) without a transition."""
        if drain == self._node.drain:
            return []
        persisted_before = replace(self._node.drain, allocations_left=0)
        self._set_node(replace(self._node, drain=drain), self._clock(), reason)
        if replace(drain, allocations_left=0) != persisted_before:
            self._mark_dirty()
        return self._ring.last(1)

    def seen_request(self, request_id: str) -> bool:
        return request_id in self._request_ids

    def notice(self, kind: str, message: str, fields: Mapping[str, object] | None = None) -> Event:
        """An eviction, a suppression change, a drain deadline…: an event that changes no record."""
        now = self._clock()
        tags = tuple((str(k), str(v)) for k, v in (fields or {}).items())
        return self._emit(EventType.NOTICE, Notice(kind, message, tags, now), now)

    # ---- persistence ---------------------------------------------------------------------------------

    def persisted_state(self, *, reset_revisions: bool = True) -> PersistedState:
        """What the state file holds. Revisions belong to one incarnation and are not written; the writer
        skips resetting them (4 ms per 1,000 allocations on the event loop)."""
        kept = (a for a in self._allocs.values() if a.phase is Phase.PENDING_LAUNCH or a.scheduler_epoch > 0)
        return PersistedState(
            node_id=self.cfg.node_id, incarnations=self._incarnations, highest_epoch=self._node.highest_epoch,
            lifecycle=self._node.lifecycle, drain=self._node.drain,
            # Every admitted allocation, launched or not: what the scheduler told us (application, resources,
            # epoch) cannot be re-derived from a bare cgroup.
            pending_launches=tuple(replace(a, revision=0) for a in kept) if reset_revisions else tuple(kept),
            request_ids=self._request_ids, saved_at=self._clock(),
        )

    def _newest(self) -> tuple[int, PersistedState]:
        """The generation and the state to write: immutable records, taken on the event loop in well under
        a millisecond; the writer encodes them (tens of ms for 1,000 allocations) in its thread."""
        return self._dirty, self.persisted_state(reset_revisions=False)

    @property
    def unsaved_changes(self) -> bool:
        durable = self._writer.durable if self._writer else self._saved
        return self._store is not None and self._dirty > durable

    @property
    def persistence_error(self) -> str | None:
        """Why the latest background write of the state file failed; None while writes succeed."""
        err = self._writer.last_error if self._writer is not None else None
        return None if err is None else str(err)

    def save(self) -> None:
        """Write the state now, synchronously (start-up, shutdown, tools)."""
        if self._store is None:
            return
        generation, state = self._newest()
        self._store.write(state)
        self._saved = max(self._saved, generation)
        if self._writer is not None:
            self._writer.durable = max(self._writer.durable, generation)

    def start_persistence(self) -> None:
        """Persist from now on through a background writer on the running event loop."""
        if self._store is None or self._writer is not None:
            return
        self._writer = StateWriter(self._newest, self._store, durable=self._saved)
        self._writer.start()
        self._writer.kick()

    async def flush(self) -> None:
        """Return once every change so far is on disk (raises StateFileError when it cannot be)."""
        if self._store is None:
            return
        if self._writer is None:
            if self._dirty > self._saved:
                self.save()
            return
        await self._writer.wait(self._dirty)

    async def close(self) -> None:
        """Stop the writer after a last write, and cut off every watcher."""
        for sub in list(self._subs):
            self.unsubscribe(sub)
        if self._writer is not None:
            await self._writer.stop()
            self._saved = self._writer.durable
            self._writer = None
        if self.unsaved_changes:
            try:
                self.save()
            except StateFileError as err:
                log.error("state not saved at shutdown: %s", err)

    def _mark_dirty(self) -> None:
        self._dirty += 1
        if self._writer is not None:
            self._writer.kick()

    # ---- mutation primitives (each emits exactly one event) -----------------------------------------

    def _emit(self, type_: EventType, obj: LedgerObject, now: float, reason: str = "") -> Event:
        self._rev += 1
        event = Event(self._rev, type_, obj, now, reason)
        self._ring.append(event)
        if self._made is not None:
            self._made.append(event)
        for sub in list(self._subs):
            if not sub.offer(event):
                self._subs.discard(sub)
                self.dropped_watchers += 1
                log.warning("watcher dropped: %s", sub.dropped)
            elif sub.waiting and not sub.wake_pending:
                self._wake_later(sub)
        return event

    def _wake_later(self, sub: Subscription) -> None:
        """Wake waiting watchers WAKE_SLICE per event-loop pass, not all at once: one Admit with 500
        watchers otherwise puts 500 stream writes in one batch of ready callbacks, and the loop's tick
        timer, due meanwhile, runs only after all of them (measured: ticks 20-60 ms late)."""
        sub.wake_pending = True
        self._to_wake.append(sub)
        if len(self._to_wake) == 1:
            asyncio.get_running_loop().call_soon(self._wake_some)

    def _wake_some(self) -> None:
        for _ in range(min(WAKE_SLICE, len(self._to_wake))):
            self._to_wake.popleft().wake()
        if self._to_wake:
            asyncio.get_running_loop().call_soon(self._wake_some)

    def _set_node(self, node: NodeRecord, now: float, reason: str = "") -> None:
        self._node = replace(node, revision=self._rev + 1)
        self._emit(EventType.MODIFIED, self._node, now, reason)

    def _ensure_app(self, app_id: str, source: Source, now: float) -> None:
        if app_id not in self._apps:
            app = Application(app_id, source, now, self._rev + 1)
            self._apps[app_id] = app
            self._order = None
            self._members[app_id] = set()
            self._emit(EventType.ADDED, app, now)

    def _drop_app_if_empty(self, app_id: str, now: float) -> None:
        if not self._members.get(app_id) and app_id in self._apps:
            app = replace(self._apps.pop(app_id), revision=self._rev + 1)
            self._order = None
            del self._members[app_id]
            self._emit(EventType.DELETED, app, now, "no allocations left")

    def _add_alloc(self, alloc: Allocation, now: float, reason: str) -> None:
        self._ensure_app(alloc.application_id, alloc.source, now)
        alloc = replace(alloc, revision=self._rev + 1)
        self._order = None if alloc.key not in self._allocs else self._order
        self._allocs[alloc.key] = alloc
        self._members[alloc.application_id].add(alloc.key)
        self._allocated = self._allocated + alloc.resources
        if alloc.phase is Phase.PENDING_LAUNCH:
            self._mark_dirty()
        self._emit(EventType.ADDED, alloc, now, reason)

    def _change_alloc(self, cur: Allocation, new: Allocation, now: float) -> None:
        if new.application_id != cur.application_id:
            self._ensure_app(new.application_id, new.source, now)
        new = replace(new, revision=self._rev + 1)
        self._allocs[new.key] = new
        self._allocated = self._allocated - cur.resources + new.resources
        if new.application_id != cur.application_id:
            self._members[cur.application_id].discard(cur.key)
            self._members[new.application_id].add(new.key)
        if Phase.PENDING_LAUNCH in (cur.phase, new.phase):
            self._mark_dirty()
        self._emit(EventType.MODIFIED, new, now, "started" if cur.phase is Phase.PENDING_LAUNCH else "")
        if new.application_id != cur.application_id:
            self._drop_app_if_empty(cur.application_id, now)

    def _remove_alloc(self, key: str, now: float, reason: str) -> None:
        cur = self._allocs.pop(key)
        self._compared.pop(key, None)
        self._order = None
        self._allocated = self._allocated - cur.resources
        self._members[cur.application_id].discard(key)
        if cur.phase is Phase.PENDING_LAUNCH:
            self._mark_dirty()
        self._emit(EventType.DELETED, replace(cur, revision=self._rev + 1), now, reason)
        self._drop_app_if_empty(cur.application_id, now)

    def _free(self) -> Resources:
        return self._node.batch_allocatable - self._allocated

    def _refuse(self, why: Refusal, message: str, existing: Allocation | None = None) -> AdmitResult:
        self.refusals[why.value] += 1
        return AdmitResult(False, self._rev, existing, refusal=why, message=message, batch_free=self._free())


_REFUSALS = {
    admission.Refusal.NOT_ACCEPTING: Refusal.NOT_SCHEDULABLE,
    admission.Refusal.BUDGET_UNKNOWN: Refusal.BUDGET_UNKNOWN,
    admission.Refusal.INSUFFICIENT_CPU: Refusal.INSUFFICIENT_CPU,
    admission.Refusal.INSUFFICIENT_MEMORY: Refusal.INSUFFICIENT_MEMORY,
}


def _held_sources(stale: Mapping[str, str]) -> set[Source] | None:
    """Sources whose allocations must not be removed this tick; None when every source is held."""
    held: set[Source] = set()
    for name in stale:
        src = _SOURCE_NAMES.get(name)
        if src is None:
            return None
        held.add(src)
    return held


def _app_id(w: Workload) -> str:
    return w.app_id or w.key


def _from_workload(w: Workload, now: float) -> Allocation:
    return Allocation(
        key=w.key, application_id=_app_id(w), source=w.source, resources=w.requests,
        phase=Phase.TERMINATING if w.terminating else Phase.RUNNING, priority=w.priority, cgroup=w.cgroup,
        name=w.name, namespace=w.namespace, created_at=now, started_at=w.started_at or now,
    )


def _updated(cur: Allocation, w: Workload, now: float) -> Allocation | None:
    """The allocation as the workload now describes it, or None when nothing changed (the common case)."""
    phase = cur.phase
    if w.terminating:
        phase = Phase.TERMINATING
    elif phase is Phase.PENDING_LAUNCH:
        phase = Phase.RUNNING
    # A source that knows no requests (a bare cgroup) keeps what the scheduler admitted.
    req, had = w.requests, cur.resources
    res = req if (req.milli_cpu or req.memory_bytes) else had
    app = w.app_id or cur.application_id
    # Field by field: this runs for every allocation every tick, and Resources' own == builds two tuples.
    if (phase is cur.phase and res.milli_cpu == had.milli_cpu and res.memory_bytes == had.memory_bytes
            and app == cur.application_id and w.priority == cur.priority and w.cgroup == cur.cgroup
            and (w.name or cur.name) == cur.name):
        return None
    return replace(cur, phase=phase, resources=res, application_id=app, priority=w.priority, cgroup=w.cgroup,
                   name=w.name or cur.name, namespace=w.namespace or cur.namespace,
                   started_at=cur.started_at or w.started_at or now)


def _fmt(r: Resources) -> str:
    return f"{r.milli_cpu} milli-CPU / {r.memory_bytes} bytes"
