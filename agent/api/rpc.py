"""The glue between grpclib and our servicers: the handler table, the call context, and the server's limits.

grpclib (pure asyncio) serves on the agent's own event loop with no thread of its own, so an idle API
costs no wake-up at all; grpc core's threads woke 13-15 times a second while a client held a connection
(docs/dependencies.md). grpclib has no message-size or concurrent-call limit, so they are applied here,
before a request is read into memory: a request's 5-byte gRPC prefix gives its length.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

from google.protobuf.message import DecodeError
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.base import CodecBase
from grpclib.server import Stream

__all__ = ["Aborted", "Call", "Limits", "Method", "PassThrough", "Status", "method_table"]

REASON_KEY = "coloc-reason"
_PREFIX = struct.Struct(">?I")
# A message whose prefix has come must follow within this: a stalled body would hold its call slot and its
# buffer for as long as the connection lives (grpclib times nothing out on its own).
BODY_TIMEOUT_S = 30.0


class Aborted(Exception):
    """Ends a call with a status, a message and the call's trailing metadata."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Call:
    """One call as its handler sees it: who is on the other end, and how to end it with a status."""

    def __init__(self, stream: Stream[Any, Any]) -> None:
        self._stream = stream
        self.trailing: tuple[tuple[str, str], ...] = ()

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = metadata

    async def abort(self, status: Status, message: str) -> NoReturn:
        raise Aborted(status, message)

    def transport_info(self, key: str) -> Any:
        """`get_extra_info` of the call's connection (grpclib keeps the transport on its `Peer`)."""
        return self._stream.peer._transport.get_extra_info(key)  # grpclib pinned in requirements.lock

    def peer_socket(self) -> Any:
        """The connection's socket (asyncio's TransportSocket: getsockopt works, I/O does not)."""
        return self.transport_info("socket")


class PassThrough(CodecBase):
    """Protobuf, except that bytes are sent as they are (messages pre-encoded by `agent.api.wire`) and a
    request whose bytes are not its message decodes to a `Malformed` the handler refuses."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return message if isinstance(message, bytes) else bytes(message.SerializeToString())

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as err:
            return Malformed(message_type, err)


class Malformed:
    """A request whose bytes are not its message: refused as INVALID_ARGUMENT by its handler."""

    def __init__(self, cls: Any, err: Exception) -> None:
        self.message = f"request: not a valid {cls.DESCRIPTOR.full_name}: {str(err)[:200]}"

    def HasField(self, name: str) -> bool:
        return False

    async def refuse(self, call: Call) -> NoReturn:
        call.set_trailing_metadata(((REASON_KEY, "invalid_argument"),))
        await call.abort(Status.INVALID_ARGUMENT, self.message)


class Limits:
    """What grpc core enforced for us: the largest message each way, the calls in flight, and (ours) the
    request bytes being received at once, which without a cap is calls × the largest message."""

    def __init__(self, max_message_bytes: int, max_calls: int) -> None:
        self.max_message_bytes = max_message_bytes
        self.max_calls = max_calls
        self.in_flight = 0
        self.max_receiving_bytes = max(4 * max_message_bytes, 64 << 20)
        self.receiving_bytes = 0


class Method:
    """One RPC: its behaviour, cardinality and message types."""

    def __init__(self, func: Callable[..., Any], cardinality: Cardinality, request: Any, reply: Any,
                 refuse_malformed: bool = True) -> None:
        self.func = func
        self.cardinality = cardinality
        self.request = request
        self.reply = reply
        # False: `func` refuses a Malformed request itself (the access policy decides and audits first)
        self.refuse_malformed = refuse_malformed


def method_table(service: str, methods: dict[str, Method], limits: Limits,
                 codec: CodecBase) -> dict[str, Handler]:
    """grpclib's `__mapping__` for one service."""
    return {f"/{service}/{name}": Handler(_serve(m, limits, codec), m.cardinality, m.request, m.reply)
            for name, m in methods.items()}


def _serve(m: Method, limits: Limits, codec: CodecBase) -> Callable[[Stream[Any, Any]], Awaitable[None]]:
    async def handle(stream: Stream[Any, Any]) -> None:
        call = Call(stream)
        if limits.in_flight >= limits.max_calls:
            await _end(stream, call, Aborted(Status.RESOURCE_EXHAUSTED,
                                             f"too many calls in flight (api.max_concurrent_rpcs "
                                             f"{limits.max_calls}); retry later"))
            return
        limits.in_flight += 1
        try:
            await _run(m, stream, call, limits, codec)
        except Aborted as err:
            await _end(stream, call, err)
        except asyncio.CancelledError:
            # Ended by the agent (a dropped watcher, shutdown): tell the client instead of leaving its
            # stream open with no trailers.
            if stream._stream.closable:
                with contextlib.suppress(Exception):
                    stream._stream.reset_nowait()
            raise
        finally:
            limits.in_flight -= 1
    return handle


async def _run(m: Method, stream: Stream[Any, Any], call: Call, limits: Limits, codec: CodecBase) -> None:
    if m.cardinality is Cardinality.STREAM_STREAM:
        async with contextlib.aclosing(m.func(_requests(stream, m, limits, codec), call)) as replies:
            async for reply in replies:
                await _send(stream, reply, m, limits, codec)
        return
    request = await _recv(stream, m.request, limits, codec)
    if request is None:
        raise Aborted(Status.INVALID_ARGUMENT, "request: no message")
    if m.refuse_malformed and isinstance(request, Malformed):
        await request.refuse(call)
    if m.cardinality is Cardinality.UNARY_STREAM:
        async with contextlib.aclosing(m.func(request, call)) as replies:
            async for reply in replies:
                await _send(stream, reply, m, limits, codec)
        return
    await _send(stream, await m.func(request, call), m, limits, codec)


async def _requests(stream: Stream[Any, Any], m: Method, limits: Limits, codec: CodecBase
                    ) -> AsyncIterator[Any]:
    while (request := await _recv(stream, m.request, limits, codec)) is not None:
        yield request


async def _recv(stream: Stream[Any, Any], cls: Any, limits: Limits, codec: CodecBase) -> Any:
    """The next request, refused by its declared length before its bytes are read; None at the end."""
    raw = stream._stream  # grpclib's recv_message reads any length into memory; the prefix tells first
    prefix = await raw.recv_data(_PREFIX.size)
    if not prefix:
        return None
    if len(prefix) < _PREFIX.size:
        raise Aborted(Status.INVALID_ARGUMENT, "request: ends inside its gRPC message prefix")
    compressed, size = _PREFIX.unpack(prefix)
    if compressed:
        raise Aborted(Status.UNIMPLEMENTED, "request: compressed messages are not accepted")
    if size > limits.max_message_bytes:
        raise Aborted(Status.RESOURCE_EXHAUSTED, f"request: {size} bytes, more than api.max_message_bytes "
                                                 f"({limits.max_message_bytes})")
    if limits.receiving_bytes + size > limits.max_receiving_bytes:
        raise Aborted(Status.RESOURCE_EXHAUSTED, f"request: {size} more bytes would put over "
                                                 f"{limits.max_receiving_bytes} in receipt at once; "
                                                 "retry later")
    limits.receiving_bytes += size
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            data = await raw.recv_data(size)
    except TimeoutError:
        raise Aborted(Status.DEADLINE_EXCEEDED, f"request: its {size} bytes did not arrive within "
                                                f"{BODY_TIMEOUT_S:.0f} s") from None
    finally:
        limits.receiving_bytes -= size
    if len(data) != size:
        raise Aborted(Status.INVALID_ARGUMENT, f"request: {len(data)} of {size} bytes before the end")
    return codec.decode(data, cls)


async def _send(stream: Stream[Any, Any], reply: Any, m: Method, limits: Limits, codec: CodecBase) -> None:
    data = codec.encode(reply, m.reply)
    if len(data) > limits.max_message_bytes:
        raise Aborted(Status.RESOURCE_EXHAUSTED, f"response: {len(data)} bytes, more than "
                                                 f"api.max_message_bytes ({limits.max_message_bytes})")
    await stream.send_message(data)


async def _end(stream: Stream[Any, Any], call: Call, err: Aborted) -> None:
    with contextlib.suppress(Exception):  # the client may be gone; nothing to tell it then
        await stream.send_trailing_metadata(status=err.status, status_message=err.message,
                                            metadata=call.trailing or None)
