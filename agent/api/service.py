"""The `coloc.v1.NodeAgent` handlers over the ledger (grpc.aio; on the ledger's event loop).

GetSnapshot and Watch return pre-serialized bytes (`agent.api.wire`), which the codec sends as they are;
the other methods return the generated messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.rpc import REASON_KEY, Call, Cardinality, Method, Status
from agent.api.wire import Encoder
from agent.decommission.controller import DrainReply, request_drain, request_recommission
from agent.executors.resource_qos import HeldLimits
from agent.published import Board, Published, source_states
from agent.state import lifecycle
from agent.state.errors import (
    InvalidRequest,
    LedgerError,
    LifecycleError,
    RevisionAhead,
    RevisionGone,
    StaleEpoch,
    StateFileError,
    WatcherDropped,
)
from agent.state.ledger import Ledger
from agent.state.records import Allocation, Application, Event, EventType, LedgerView, NodeRecord
from agent.state.ring import Subscription
from agent.state.validate import check_epoch
from agent.trace.switch import TraceSwitch
from qos.policies import PolicyConfig

log = logging.getLogger("coloc.api")

PolicySettings = Callable[[], tuple[PolicyConfig, Mapping[str, str]]]
"""The policy settings in force now and, per NodeSLO-mapped setting, where it came from (NodeSLO | yaml)."""

SERVICE = "coloc.v1.NodeAgent"

MAX_RECORD_S = 7 * 86_400  # the longest `Record` asks for: a trace past that is the config's to turn on

# How long a dropped watcher's stream may take to deliver what was queued before it is ended by force.
DROP_GRACE_S = 5.0

_CODES: list[tuple[type[LedgerError], Status, str]] = [
    (InvalidRequest, Status.INVALID_ARGUMENT, "invalid_argument"),
    (RevisionAhead, Status.INVALID_ARGUMENT, "revision_ahead"),
    (StaleEpoch, Status.FAILED_PRECONDITION, "stale_epoch"),
    (LifecycleError, Status.FAILED_PRECONDITION, "lifecycle"),
    (RevisionGone, Status.OUT_OF_RANGE, "revision_gone"),
    (WatcherDropped, Status.RESOURCE_EXHAUSTED, "watcher_dropped"),
    (StateFileError, Status.UNAVAILABLE, "not_durable"),
]


def status_of(err: LedgerError) -> tuple[Status, str]:
    for cls, code, reason in _CODES:
        if isinstance(err, cls):
            return code, reason
    return Status.INTERNAL, "internal"


async def abort(context: Call, code: Status, reason: str,
                message: str) -> NoReturn:
    context.set_trailing_metadata(((REASON_KEY, reason),))
    await context.abort(code, message)
    raise AssertionError("unreachable")  # abort raises


async def _abort(context: Call, err: LedgerError) -> NoReturn:
    code, reason = status_of(err)
    await abort(context, code, reason, str(err))


class NodeAgentService:
    def __init__(self, ledger: Ledger, *, max_streams: int, bookmark_interval_s: float,
                 max_events_per_message: int, max_message_bytes: int, board: Board | None = None,
                 settings: PolicySettings | None = None,
                 limits: Callable[[], HeldLimits] | None = None, trace: TraceSwitch | None = None) -> None:
        self._ledger = ledger
        self._trace = trace  # the trace's recording (docs/replay.md): `Record` turns it on for a while
        self._max_streams = max_streams
        self._bookmark_s = bookmark_interval_s
        self._max_events = max_events_per_message
        self._max_chunk_bytes = max(64 << 10, max_message_bytes // 2)
        self._board = board
        self._settings = settings
        self._limits = limits  # what the limit executors hold now (read-only)
        # An event the ring no longer holds is never served again (a resume from before it is told to
        # relist), so the cache of encoded events is no bigger than the ring.
        self._enc = Encoder(event_cache=ledger.cfg.ring_size)
        self._watchers: set[Subscription] = set()

    @property
    def streams(self) -> int:
        """Watch streams holding a slot: a dropped watcher gives its slot back at once, not when (or if)
        its handler gets past the write a client that stopped reading never lets complete."""
        return len(self._watchers)

    # ---- registration ---------------------------------------------------------------------------------

    def methods(self) -> dict[str, Method]:
        def unary(fn: Any, req: Any, resp: Any = None) -> Method:
            return Method(fn, Cardinality.UNARY_UNARY, req, resp)

        return {
            "GetSnapshot": unary(self.get_snapshot, pb.GetSnapshotRequest, pb.Snapshot),
            "Watch": Method(self.watch, Cardinality.UNARY_STREAM, pb.WatchRequest, pb.WatchResponse),
            "AckRecovery": unary(self.ack_recovery, pb.AckRecoveryRequest, pb.AckRecoveryResponse),
            "Admit": unary(self.admit, pb.AdmitRequest, pb.AdmitResponse),
            "GetStatus": unary(self.get_status, pb.GetStatusRequest, pb.Status),
            "Drain": unary(self.drain, pb.DrainRequest, pb.DrainResponse),
            "Recommission": unary(self.recommission, pb.RecommissionRequest, pb.DrainResponse),
            "Record": unary(self.record, pb.RecordRequest, pb.RecordResponse),
        }

    # ---- reads ----------------------------------------------------------------------------------------

    async def get_snapshot(self, request: pb.GetSnapshotRequest, context: Call
                           ) -> bytes:
        return self._enc.snapshot(self._ledger.view())

    async def watch(self, request: pb.WatchRequest, context: Call
                    ) -> AsyncIterator[bytes]:
        ledger = self._ledger
        start = await self._check_watch(request, context)
        limit = min(request.max_events_per_message or self._max_events, self._max_events)
        # Backlog (or view) and subscription are taken in one step of the event loop: no gap, no overlap.
        view: LedgerView | None = None
        backlog: list[Event] = []
        try:
            if start == "send_initial":
                view = ledger.view()
            else:
                backlog = ledger.events_after(request.from_revision)
            sub = ledger.subscribe(None, on_drop=self._on_drop(asyncio.current_task()))
        except LedgerError as err:
            await _abort(context, err)
        synced_at = ledger.revision
        self._watchers.add(sub)
        try:
            for chunk in self._catch_up(view, backlog, limit):
                yield chunk
            yield Encoder.watch_response([Encoder.marker(synced_at, pb.EVENT_TYPE_INITIAL_SYNC_END)])
            while True:
                try:
                    batch = await sub.next_batch(limit, self._bookmark_s)
                except WatcherDropped as err:
                    await _abort(context, err)
                yield self._live(batch)
        finally:
            self._watchers.discard(sub)
            ledger.unsubscribe(sub)

    def _on_drop(self, task: asyncio.Task[Any] | None) -> Callable[[Subscription], None]:
        """What to do when the ledger cuts off the subscription of the Watch running in `task`."""
        def dropped(sub: Subscription) -> None:
            self._watchers.discard(sub)
            if task is not None:
                # A reader that still reads gets what was queued and then WatcherDropped; one stuck in a
                # write to a client that stopped reading is ended here, freeing its RPC as well.
                asyncio.get_running_loop().call_later(DROP_GRACE_S, _cancel_unless_done, task)
        return dropped

    async def _check_watch(self, request: pb.WatchRequest, context: Call
                           ) -> str:
        """Abort a Watch this agent cannot serve; else which start it asked for."""
        if self.streams >= self._max_streams:
            await abort(context, Status.RESOURCE_EXHAUSTED, "too_many_streams",
                        f"too many watch streams (limit {self._max_streams}); retry later")
        start = request.WhichOneof("start")
        if start is None:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        "start: set either from_revision or send_initial")
        if start == "from_revision" and not request.incarnation:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        "incarnation: required with from_revision (revisions are per incarnation)")
        if request.incarnation and request.incarnation != self._ledger.identity.incarnation:
            await self._wrong_incarnation(request.incarnation, context)
        if start == "send_initial" and not request.send_initial:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        "send_initial: must be true when set")
        return start

    def _catch_up(self, view: LedgerView | None, backlog: list[Event], limit: int) -> list[bytes]:
        """The messages before the sync marker: the whole view (send_initial) or the missed events."""
        if view is not None:
            objs: list[NodeRecord | Application | Allocation] = [
                view.node, *view.applications, *view.allocations]
            return self._chunks([self._enc.initial(view.revision, o) for o in objs], limit)
        inc = self._ledger.identity.incarnation
        return self._chunks([self._enc.event(inc, e) for e in backlog], limit)

    def _live(self, batch: list[Event]) -> bytes:
        """One message of the live stream: the new events, or a bookmark when there were none."""
        if batch:
            inc = self._ledger.identity.incarnation
            return Encoder.watch_response([self._enc.event(inc, e) for e in batch])
        return Encoder.watch_response([Encoder.marker(self._ledger.revision, pb.EVENT_TYPE_BOOKMARK)])

    def _chunks(self, events: list[bytes], limit: int) -> list[bytes]:
        out: list[bytes] = []
        cur: list[bytes] = []
        size = 0
        for e in events:
            if cur and (len(cur) >= limit or size + len(e) > self._max_chunk_bytes):
                out.append(Encoder.watch_response(cur))
                cur, size = [], 0
            cur.append(e)
            size += len(e) + 8
        if cur:
            out.append(Encoder.watch_response(cur))
        return out

    async def get_status(self, request: pb.GetStatusRequest, context: Call
                         ) -> pb.Status:
        ledger = self._ledger
        view = ledger.view()
        n = min(request.recent or 10, 200)
        out = pb.Status(identity=convert.identity_pb(view.identity), revision=view.revision,
                        node=convert.node_pb(view.node), applications=len(view.applications),
                        batch_allocated=convert.resources_pb(view.batch_allocated),
                        watchers=ledger.watcher_count, dropped_watchers=ledger.dropped_watchers,
                        startup_problem=ledger.startup_problem or "", state_unsaved=ledger.unsaved_changes)
        out.node.drain.allocations_left = view.node.drain.allocations_left
        out.awaits_scheduler_ack = ledger.cfg.await_scheduler_ack
        waiting_for, since = lifecycle.waiting(view.node, view.identity.started_at)
        if waiting_for:
            out.waiting_for = waiting_for
            out.waiting_since_unix_ms = convert.ms(since)
            out.waiting_s = max(0.0, ledger.now() - since)
        counts: dict[tuple[int, int], list[int]] = {}
        for a in view.allocations:
            c = counts.setdefault((convert.SOURCE_TO_PB[a.source], convert.PHASE_TO_PB[a.phase]), [0, 0, 0])
            c[0] += 1
            c[1] += a.resources.milli_cpu
            c[2] += a.resources.memory_bytes
        for (src, phase), (k, cpu, mem) in sorted(counts.items()):
            out.allocations.append(pb.PhaseCount(source=src, phase=phase, count=k,  # type: ignore[arg-type]
                                                 resources=pb.Resources(milli_cpu=cpu, memory_bytes=mem)))
        notices = [e for e in ledger.recent_events(4 * n + 64) if e.type is EventType.NOTICE][-n:]
        for e in notices:
            out.recent_notices.append(pb.Event.FromString(self._enc.event(view.identity.incarnation, e)))
        pub = self._board.get() if self._board is not None else None
        if pub is not None:
            out.tick = pub.tick
            out.tick_age_s = max(0.0, time.monotonic() - pub.tick_monotonic)
            out.fast_path_mode = pub.fast_path_mode
            out.fast_path_reason = pub.fast_path_reason
            for st in source_states(pub, time.monotonic()):
                out.sources.append(pb.SourceStatus(name=st.name, has_age=st.age_s is not None,
                                                   age_s=st.age_s or 0.0, stale=st.stale, reason=st.reason))
            for r in pub.recent_actions[-n:]:
                out.recent_actions.append(pb.ActionRecord(at_unix_ms=convert.ms(r.at), policy=r.policy,
                                                          kind=r.kind, target=r.target, outcome=r.outcome,
                                                          reason=r.reason))
            out.not_ready_reason = pub.snapshot.be_tier.missing if pub.snapshot is not None else ""
            if pub.snapshot is not None:
                out.disks.extend(convert.disks_pb(pub.snapshot.io, pub.snapshot.workloads))
                out.disk_notes.extend(pub.snapshot.io.notes if pub.snapshot.io is not None else ())
            for o in pub.knob_overrides[-n:]:
                out.knob_overrides.append(pb.KnobOverride(
                    at_unix_ms=convert.ms(o.at), knob=o.knob, cgroup=o.cgroup, writer=o.writer, found=o.found,
                    wanted=o.wanted, has_off_for=o.off_for_s is not None, off_for_s=o.off_for_s or 0.0))
        out.settings.extend(self._setting_rows(pub))
        if self._limits is not None:
            out.enforced_limits.extend(convert.limits_pb(self._limits()))
        return out

    def _setting_rows(self, pub: Published | None) -> list[pb.SettingSource]:
        """Each NodeSLO-mapped policy setting, its value and source in force now; without the runtime's
        settings, only the sources the last tick published."""
        if self._settings is not None:
            return convert.settings_pb(*self._settings())
        if pub is None:
            return []
        return [pb.SettingSource(name=k, source=v) for k, v in sorted(pub.settings_sources.items())]

    # ---- mutations ------------------------------------------------------------------------------------

    async def _epoch(self, fence: pb.Fence, has_fence: bool, context: Call
                     ) -> int:
        if not has_fence:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        "fence: required on every mutating call")
        try:
            check_epoch(fence.scheduler_epoch)
        except InvalidRequest as err:
            await _abort(context, err)
        return fence.scheduler_epoch

    async def _check_incarnation(self, given: str, required: bool,
                                 context: Call) -> None:
        if not given and required:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        "incarnation: required")
        if given and given != self._ledger.identity.incarnation:
            await self._wrong_incarnation(given, context)

    async def _wrong_incarnation(self, given: str, context: Call) -> NoReturn:
        mine = self._ledger.identity.incarnation
        await abort(context, Status.FAILED_PRECONDITION, "incarnation_mismatch",
                    f"incarnation: {given} is not this agent's incarnation {mine} "
                    "(the agent restarted); take a new snapshot")

    async def _durable(self, context: Call) -> None:
        try:
            await self._ledger.flush()
        except StateFileError as err:
            await abort(context, Status.UNAVAILABLE, "not_durable",
                        f"recorded but not yet durable ({err}); retry the same request")

    async def ack_recovery(self, request: pb.AckRecoveryRequest, context: Call
                           ) -> pb.AckRecoveryResponse:
        epoch = await self._epoch(request.fence, request.HasField("fence"), context)
        await self._check_incarnation(request.incarnation, True, context)
        try:
            result = self._ledger.ack_recovery(epoch, request.applied_revision)
        except LedgerError as err:
            await _abort(context, err)
        await self._durable(context)
        return pb.AckRecoveryResponse(lifecycle=convert.LIFECYCLE_TO_PB[result.lifecycle],
                                      revision=result.revision)

    async def admit(self, request: pb.AdmitRequest, context: Call
                    ) -> pb.AdmitResponse:
        epoch = await self._epoch(request.fence, request.HasField("fence"), context)
        await self._check_incarnation(request.incarnation, False, context)
        if not request.HasField("allocation"):
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument", "allocation: required")
        try:
            result = self._ledger.admit(convert.admit_request_from(request.allocation), epoch)
        except LedgerError as err:
            await _abort(context, err)
        if result.accepted:
            await self._durable(context)
        out = pb.AdmitResponse(accepted=result.accepted, already_admitted=result.already_admitted,
                               message=result.message, revision=result.revision,
                               batch_free=convert.resources_pb(result.batch_free))
        if result.refusal is not None:
            out.refusal = convert.REFUSAL_TO_PB[result.refusal]
        if result.allocation is not None:
            out.allocation.CopyFrom(convert.allocation_pb(result.allocation))
        return out

    async def drain(self, request: pb.DrainRequest, context: Call
                    ) -> pb.DrainResponse:
        epoch = await self._epoch(request.fence, request.HasField("fence"), context)
        if request.mode not in (pb.DRAIN_MODE_GRACEFUL, pb.DRAIN_MODE_FORCEFUL):
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        f"mode: must be DRAIN_MODE_GRACEFUL or DRAIN_MODE_FORCEFUL, got {request.mode}")
        try:
            result = request_drain(self._ledger, epoch, graceful=request.mode == pb.DRAIN_MODE_GRACEFUL,
                                   timeout_s=request.timeout_seconds, wait_for_apps=request.wait_for_apps,
                                   request_id=request.request_id, reason=request.reason)
        except LedgerError as err:
            await _abort(context, err)
        await self._durable(context)
        return _drain_response(result)

    async def recommission(self, request: pb.RecommissionRequest, context: Call
                           ) -> pb.DrainResponse:
        epoch = await self._epoch(request.fence, request.HasField("fence"), context)
        try:
            result = request_recommission(self._ledger, epoch, request_id=request.request_id)
        except LedgerError as err:
            await _abort(context, err)
        await self._durable(context)
        return _drain_response(result)


    async def record(self, request: pb.RecordRequest, context: Call) -> pb.RecordResponse:
        trace = self._trace
        if trace is None:
            await abort(context, Status.FAILED_PRECONDITION, "no_trace", "this agent records no trace")
        if request.seconds > MAX_RECORD_S:
            await abort(context, Status.INVALID_ARGUMENT, "invalid_argument",
                        f"seconds: at most {MAX_RECORD_S} (7 days), got {request.seconds}")
        if request.seconds == 0:
            state = trace.stop()
        else:
            writer = None
            if trace.recorder is None:
                try:  # the files are opened off the event loop: a slow disk holds up no tick
                    writer = await asyncio.to_thread(trace.open_writer)
                except OSError as err:
                    await abort(context, Status.FAILED_PRECONDITION, "trace_dir",
                                f"trace.dir {trace.state().dir}: {err.strerror or err}")
            state = trace.start(writer, float(request.seconds))
        log.info("trace recording",
                 extra={"fields": {"on": state.on, "until": state.until, "dir": state.dir}})
        return pb.RecordResponse(recording=state.on, dir=state.dir, ticks=state.ticks, dropped=state.dropped,
                                 until_unix_ms=int(state.until * 1000) if state.on and state.until else 0)


def _cancel_unless_done(task: asyncio.Task[Any]) -> None:
    if not task.done():
        task.cancel()


def _drain_response(r: DrainReply) -> pb.DrainResponse:
    out = pb.DrainResponse(lifecycle=convert.LIFECYCLE_TO_PB[r.lifecycle], drain=convert.drain_pb(r.drain),
                           revision=r.revision, remaining_allocations=r.allocations_left)
    out.drain.allocations_left = r.allocations_left
    return out
