"""An asyncio client of the node API, returning the ledger's own record types.

Addresses: `/path/agent.sock`, a relative `agent.sock` or `run/agent.sock`, `unix:/path`, `unix:///path`, or
`host:port` (plaintext TCP: the agent's own TCP listener, `api.tcp_address`, takes only TLS with a client
certificate, which this client does not present; use its unix sockets).
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.state.records import AdmitRequest, AdmitResult, Event, LedgerObject, LedgerView, Lifecycle

REASON_KEY = "coloc-reason"  # trailing metadata set by the agent next to an error status

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.initial_reconnect_backoff_ms", 100),
    # Also gRPC core's minimum connect timeout (the handshake's deadline): on a loaded node (the agent's pod
    # has a small CPU request) 100 ms is too short. The call's own deadline still rules.
    ("grpc.min_reconnect_backoff_ms", 5000),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
    # Each client its own connection: the agent limits the streams per connection (api.max_concurrent_streams,
    # 16 on the read socket), and gRPC core refuses (REFUSED_STREAM) a stream past it that clients sharing
    # one connection could open at once.
    ("grpc.use_local_subchannel_pool", 1),
)


def target(address: str) -> str:
    """A gRPC target for an address as operators write it."""
    address = address.strip()
    if address.startswith(("unix:", "unix-abstract:")):
        return address
    if address.startswith(("/", "./", "../")) or ":" not in address:
        # A path (gRPC would read a bare `agent.sock` as a DNS name); made absolute, as gRPC resolves
        # `unix:` targets itself.
        return f"unix:{os.path.abspath(address)}"
    return address


class AgentCallError(Exception):
    """A call failed; `code` is the gRPC status (OUT_OF_RANGE, FAILED_PRECONDITION, UNAVAILABLE, ...) and
    `reason` the agent's machine-readable reason (stale_epoch, incarnation_mismatch, revision_gone, ...)."""

    def __init__(self, address: str, method: str, code: grpc.StatusCode, details: str,
                 reason: str = "") -> None:
        super().__init__(f"{address} {method}: {code.name}: {details}")
        self.address = address
        self.method = method
        self.code = code
        self.details = details
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Marker:
    """BOOKMARK (every event up to `revision` was sent) or INITIAL_SYNC_END (caught up at `revision`)."""

    revision: int
    initial_sync_end: bool


def view_from(m: pb.Snapshot) -> LedgerView:
    return LedgerView(
        identity=convert.identity_from(m.identity), revision=m.revision,
        oldest_watchable_revision=m.oldest_watchable_revision, node=convert.node_from(m.node),
        applications=tuple(convert.application_from(a) for a in m.applications),
        allocations=tuple(convert.allocation_from(a) for a in m.allocations),
        taken_at=convert.sec(m.taken_unix_ms),
    )


def event_from(m: pb.Event) -> Event | Marker:
    if m.type == pb.EVENT_TYPE_BOOKMARK:
        return Marker(m.revision, False)
    if m.type == pb.EVENT_TYPE_INITIAL_SYNC_END:
        return Marker(m.revision, True)
    which = m.WhichOneof("object")
    obj: LedgerObject
    if which == "allocation":
        obj = convert.allocation_from(m.allocation)
    elif which == "application":
        obj = convert.application_from(m.application)
    elif which == "node":
        obj = convert.node_from(m.node)
    elif which == "notice":
        obj = convert.notice_from(m.notice)
    else:
        raise ValueError(f"event at revision {m.revision} has no object")
    return Event(m.revision, convert.EVENT_FROM_PB[m.type], obj, convert.sec(m.at_unix_ms), m.reason)


def _method(name: str) -> tuple[str, bool, Any, Any]:
    m = pb.DESCRIPTOR.services_by_name["NodeAgent"].methods_by_name[name]
    return (f"/{m.containing_service.full_name}/{name}", m.server_streaming,
            getattr(pb, m.input_type.name).SerializeToString, getattr(pb, m.output_type.name).FromString)


_METHODS = {m.name: _method(m.name) for m in pb.DESCRIPTOR.services_by_name["NodeAgent"].methods}


class _Stub:
    """NodeAgentStub's methods, each made on first use: a scheduler holds a client per node (10,000 at
    once in recovery), which calls three of the eight."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel

    def __getattr__(self, name: str) -> Any:
        path, streaming, serialize, parse = _METHODS[name]
        make: Any = self._channel.unary_stream if streaming else self._channel.unary_unary
        call = make(path, request_serializer=serialize, response_deserializer=parse, _registered_method=True)
        setattr(self, name, call)
        return call


class AgentClient:
    """One channel to one agent. Use as `async with AgentClient(addr) as c:`."""

    def __init__(self, address: str, *, options: tuple[tuple[str, int], ...] = CHANNEL_OPTIONS) -> None:
        self.address = address
        self._channel = grpc.aio.insecure_channel(target(address), options=list(options))
        self._stub: Any = _Stub(self._channel)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(None)

    def _error(self, method: str, err: grpc.aio.AioRpcError) -> AgentCallError:
        reason = ""
        for item in err.trailing_metadata() or ():
            key: str
            value: str | bytes
            key, value = item  # type: ignore[misc]
            if key == REASON_KEY:
                reason = value if isinstance(value, str) else bytes(value).decode()
        return AgentCallError(self.address, method, err.code(), err.details() or "", reason)

    async def _unary(self, method: str, call: Any, request: Any, timeout: float | None) -> Any:
        try:
            return await call(request, timeout=timeout)
        except grpc.aio.AioRpcError as err:
            raise self._error(method, err) from None

    async def snapshot_message(self, timeout: float | None = 10.0) -> pb.Snapshot:
        msg: pb.Snapshot = await self._unary("GetSnapshot", self._stub.GetSnapshot, pb.GetSnapshotRequest(),
                                             timeout)
        return msg

    async def get_snapshot(self, timeout: float | None = 10.0) -> LedgerView:
        return view_from(await self.snapshot_message(timeout))

    async def watch(self, *, incarnation: str = "", from_revision: int | None = None,
                    send_initial: bool = False, max_events_per_message: int = 0,
                    ) -> AsyncGenerator[list[Event | Marker], None]:
        """Batches of events in revision order; raises AgentCallError when the stream ends with an error."""
        req = pb.WatchRequest(incarnation=incarnation, max_events_per_message=max_events_per_message)
        if send_initial:
            req.send_initial = True
        else:
            req.from_revision = from_revision or 0
        call = self._stub.Watch(req)
        try:
            async for resp in call:
                yield [event_from(e) for e in resp.events]
        except grpc.aio.AioRpcError as err:
            raise self._error("Watch", err) from None
        finally:
            call.cancel()

    def watch_stream(self, *, incarnation: str, from_revision: int) -> WatchStream:
        """As `watch` from `from_revision`, read a message at a time by `WatchStream.next` (no generator)."""
        req = pb.WatchRequest(incarnation=incarnation, from_revision=from_revision)
        return WatchStream(self, self._stub.Watch(req))

    def watch_raw(self, request: pb.WatchRequest) -> Any:
        """The underlying stream call (for tools that want the messages themselves)."""
        return self._stub.Watch(request)

    async def ack_recovery(self, epoch: int, incarnation: str, applied_revision: int, *,
                           scheduler_id: str = "", timeout: float | None = 10.0) -> tuple[Lifecycle, int]:
        req = pb.AckRecoveryRequest(fence=pb.Fence(scheduler_id=scheduler_id, scheduler_epoch=epoch),
                                    incarnation=incarnation, applied_revision=applied_revision)
        resp: pb.AckRecoveryResponse = await self._unary("AckRecovery", self._stub.AckRecovery, req, timeout)
        return convert.LIFECYCLE_FROM_PB[resp.lifecycle], resp.revision

    async def admit(self, request: AdmitRequest, epoch: int, *, incarnation: str = "", scheduler_id: str = "",
                    timeout: float | None = 10.0) -> AdmitResult:
        req = pb.AdmitRequest(fence=pb.Fence(scheduler_id=scheduler_id, scheduler_epoch=epoch),
                              incarnation=incarnation, allocation=convert.allocation_spec_pb(request))
        resp: pb.AdmitResponse = await self._unary("Admit", self._stub.Admit, req, timeout)
        return AdmitResult(
            accepted=resp.accepted, revision=resp.revision,
            allocation=convert.allocation_from(resp.allocation) if resp.HasField("allocation") else None,
            refusal=convert.REFUSAL_FROM_PB.get(resp.refusal), message=resp.message,
            already_admitted=resp.already_admitted, batch_free=convert.resources_from(resp.batch_free),
        )

    async def status(self, recent: int = 10, timeout: float | None = 10.0) -> pb.Status:
        req = pb.GetStatusRequest(recent=recent)
        resp: pb.Status = await self._unary("GetStatus", self._stub.GetStatus, req, timeout)
        return resp

    async def drain(self, epoch: int, *, graceful: bool = True, timeout_s: int = -1,
                    wait_for_apps: bool = False, request_id: str = "", reason: str = "",
                    scheduler_id: str = "", timeout: float | None = 10.0) -> pb.DrainResponse:
        """Decommission the node (graceful: wait `timeout_s`, < 0 forever, 0 now; forceful: evict now)."""
        req = pb.DrainRequest(fence=pb.Fence(scheduler_id=scheduler_id, scheduler_epoch=epoch),
                              request_id=request_id, timeout_seconds=timeout_s, wait_for_apps=wait_for_apps,
                              mode=pb.DRAIN_MODE_GRACEFUL if graceful else pb.DRAIN_MODE_FORCEFUL,
                              reason=reason)
        resp: pb.DrainResponse = await self._unary("Drain", self._stub.Drain, req, timeout)
        return resp

    async def record(self, seconds: int, timeout: float | None = 10.0) -> pb.RecordResponse:
        """Record the agent's trace for `seconds` from now (0: stop)."""
        req = pb.RecordRequest(seconds=seconds)
        resp: pb.RecordResponse = await self._unary("Record", self._stub.Record, req, timeout)
        return resp

    async def recommission(self, epoch: int, *, request_id: str = "", scheduler_id: str = "",
                           timeout: float | None = 10.0) -> pb.DrainResponse:
        req = pb.RecommissionRequest(fence=pb.Fence(scheduler_id=scheduler_id, scheduler_epoch=epoch),
                                     request_id=request_id)
        resp: pb.DrainResponse = await self._unary("Recommission", self._stub.Recommission, req, timeout)
        return resp


class WatchStream:
    """One Watch call. `next()` returns the next message's events (raises AgentCallError when the stream
    ends, with its status); `cancel()` ends it."""

    def __init__(self, client: AgentClient, call: Any) -> None:
        self._client = client
        self._call = call

    async def next(self) -> list[Event | Marker]:
        try:
            resp = await self._call.read()
        except grpc.aio.AioRpcError as err:
            raise self._client._error("Watch", err) from None
        if not isinstance(resp, pb.WatchResponse):  # grpc.aio.EOF: it ended with OK
            raise AgentCallError(self._client.address, "Watch", grpc.StatusCode.UNAVAILABLE, "stream ended")
        return [event_from(e) for e in resp.events]

    def cancel(self) -> None:
        self._call.cancel()
