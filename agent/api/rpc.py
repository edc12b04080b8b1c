"""The glue between grpc.aio and our servicers: methods, the call context, our parser and serializer.

Handlers get grpc.aio's `ServicerContext` (`Call`): `abort`, trailing metadata, `auth_context` (the TLS
peer's certificate names). Requests are parsed by us, so a request whose bytes are not its message reaches
its handler as a `Malformed` it refuses (INVALID_ARGUMENT) instead of gRPC's UNKNOWN with a traceback, and
responses already encoded (`agent.api.wire`) are sent as they are. A response over `api.max_message_bytes`
is refused naming the setting (gRPC core would refuse it too, naming nothing we configure).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, TypeAlias

import grpc
from google.protobuf.message import DecodeError

__all__ = ["REASON_KEY", "Call", "Cardinality", "Malformed", "Method", "Status",
           "encode", "handler_of", "raw_bytes"]

REASON_KEY = "coloc-reason"
Status = grpc.StatusCode
Call: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class Cardinality(enum.Enum):
    UNARY_UNARY = "unary_unary"
    UNARY_STREAM = "unary_stream"
    STREAM_STREAM = "stream_stream"


class Malformed:
    """A request whose bytes are not its message: refused as INVALID_ARGUMENT by its handler."""

    def __init__(self, cls: Any, err: Exception) -> None:
        self.message = f"request: not a valid {cls.DESCRIPTOR.full_name}: {str(err)[:200]}"

    def HasField(self, name: str) -> bool:
        return False

    async def refuse(self, call: Call) -> NoReturn:
        call.set_trailing_metadata(((REASON_KEY, "invalid_argument"),))
        await call.abort(Status.INVALID_ARGUMENT, self.message)
        raise AssertionError("unreachable")  # abort raises


class Method:
    """One RPC: its behaviour, cardinality and message types."""

    def __init__(self, func: Callable[..., Any], cardinality: Cardinality, request: Any, reply: Any,
                 refuse_malformed: bool = True, writes: bool = False) -> None:
        self.func = func
        self.cardinality = cardinality
        self.request = request
        self.reply = reply
        # False: `func` refuses a Malformed request itself (the access policy decides and audits first)
        self.refuse_malformed = refuse_malformed
        self.writes = writes  # a stream handler that calls `call.write` instead of yielding


def raw_bytes(data: bytes) -> bytes:
    return data


def encode(message: Any) -> bytes:
    """A generated message, or bytes already encoded (`agent.api.wire`) sent as they are."""
    return message if isinstance(message, bytes) else bytes(message.SerializeToString())


def _parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except DecodeError as err:
            return Malformed(cls, err)
    return parse


class _Adapter:
    """What every handler shares: the size check naming the setting, malformed requests refused."""

    def __init__(self, m: Method, max_message_bytes: int) -> None:
        self.m = m
        self.max_bytes = max_message_bytes

    async def checked(self, call: Call, reply: Any) -> bytes:
        data = encode(reply)
        if len(data) > self.max_bytes:
            await call.abort(Status.RESOURCE_EXHAUSTED, f"response: {len(data)} bytes, more than "
                                                        f"api.max_message_bytes ({self.max_bytes})")
        return data

    async def refuse_malformed(self, request: Any, call: Call) -> None:
        if self.m.refuse_malformed and isinstance(request, Malformed):
            await request.refuse(call)

    async def stream_out(self, replies: AsyncIterator[Any], call: Call) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(replies):  # type: ignore[type-var]
            async for reply in replies:
                yield await self.checked(call, reply)

    async def unary(self, request: Any, call: Call) -> bytes:
        await self.refuse_malformed(request, call)
        return await self.checked(call, await self.m.func(request, call))

    async def unary_stream(self, request: Any, call: Call) -> AsyncIterator[bytes]:
        await self.refuse_malformed(request, call)
        async for data in self.stream_out(self.m.func(request, call), call):
            yield data

    async def unary_writes(self, request: Any, call: Call) -> None:
        await self.refuse_malformed(request, call)
        await self.m.func(request, call)

    async def stream_stream(self, requests: AsyncIterator[Any], call: Call) -> AsyncIterator[bytes]:
        async def parsed() -> AsyncIterator[Any]:
            async for request in requests:
                await self.refuse_malformed(request, call)
                yield request
        async for data in self.stream_out(self.m.func(parsed(), call), call):
            yield data


def handler_of(m: Method, max_message_bytes: int) -> grpc.RpcMethodHandler[Any, Any]:
    """The grpc.aio handler for `m`: our parser, and a size check naming the setting."""
    parse = raw_bytes if m.request is bytes else _parser(m.request)
    a = _Adapter(m, max_message_bytes)
    if m.cardinality is Cardinality.UNARY_UNARY:
        return grpc.unary_unary_rpc_method_handler(a.unary, request_deserializer=parse,
                                                   response_serializer=encode)
    if m.cardinality is Cardinality.UNARY_STREAM:
        return grpc.unary_stream_rpc_method_handler(a.unary_writes if m.writes else a.unary_stream,
                                                    request_deserializer=parse, response_serializer=encode)
    return grpc.stream_stream_rpc_method_handler(a.stream_stream, request_deserializer=parse,
                                                 response_serializer=encode)
