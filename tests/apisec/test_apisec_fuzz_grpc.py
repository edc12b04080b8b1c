"""Issue 15: every gRPC method under random and malformed requests answers with a clean status or a valid
reply, never an escaped exception (UNKNOWN), keeps serving, and writes nothing outside its directory.

A real server on a real unix socket in a thread of its own; hypothesis builds requests from the messages'
descriptors (any field, any value of its type) and raw garbage bytes. Bounded for CI by `max_examples`;
raise COLOC_FUZZ_EXAMPLES for a longer run by hand.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from apiseckit import Served, serving
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.api.coloc.v1 import agent_pb2 as pb

EXAMPLES = int(os.environ.get("COLOC_FUZZ_EXAMPLES", "60"))
SERVICE = pb.DESCRIPTOR.services_by_name["NodeAgent"]
METHODS = {m.name: m for m in SERVICE.methods}
# Clean answers: grpc's own deserialization failure is INTERNAL "Exception deserializing request".
CLEAN = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE,
         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
         grpc.StatusCode.PERMISSION_DENIED}

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_INT64: st.integers(-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SINT64: st.integers(-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT64: st.integers(0, (1 << 64) - 1),
    FieldDescriptor.TYPE_INT32: st.integers(-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_UINT32: st.integers(0, (1 << 32) - 1),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32),
    FieldDescriptor.TYPE_STRING: st.one_of(st.text(max_size=40), st.sampled_from(
        ["../../etc/passwd", "/", "yarn/../x", "local/../../escape", "k8s/" + "a" * 300, "\x00"])),
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=40),
}


def message(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A dict of field → value for `desc` (any subset of its fields)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3 or f.message_type.GetOptions().map_entry:
                continue
            value: st.SearchStrategy[Any] = message(f.message_type, depth + 1)
        elif f.type == FieldDescriptor.TYPE_ENUM:
            value = st.integers(-3, len(f.enum_type.values) + 2)
        else:
            value = _SCALARS.get(f.type, st.integers(0, 1 << 31))
        is_repeated = getattr(f, "is_repeated", None)
        repeated = is_repeated if isinstance(is_repeated, bool) else f.label == FieldDescriptor.LABEL_REPEATED
        fields[f.name] = st.lists(value, max_size=3) if repeated else value
    return st.fixed_dictionaries({}, optional=fields)


def build(cls: Any, values: dict[str, Any]) -> bytes:
    msg = cls()
    for name, v in values.items():
        f = msg.DESCRIPTOR.fields_by_name[name]
        try:
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                items = v if isinstance(v, list) else [v]
                for item in items:
                    sub = getattr(msg, name).add() if isinstance(v, list) else getattr(msg, name)
                    sub.MergeFromString(build(type(sub), item))
            elif isinstance(v, list):
                getattr(msg, name).extend(v)
            else:
                setattr(msg, name, v)
        except (ValueError, TypeError):
            continue  # a value protobuf itself refuses to hold; the garbage-bytes case covers the wire
    return bytes(msg.SerializeToString())


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Served, grpc.Channel]]:
    ready = threading.Event()
    box: dict[str, Any] = {}
    loop = asyncio.new_event_loop()

    async def run() -> None:
        async with serving(ledger_cfg={"await_scheduler_ack": False}, bookmark_interval_s=0.05) as s:
            box["s"] = s
            box["stop"] = asyncio.Event()
            ready.set()
            await box["stop"].wait()

    t = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    t.start()
    assert ready.wait(30)
    s: Served = box["s"]
    channel = grpc.insecure_channel(f"unix:{s.admin_socket}")  # every method, mutations parsed in full
    try:
        yield s, channel
    finally:
        channel.close()
        loop.call_soon_threadsafe(box["stop"].set)
        t.join(30)


def call(channel: grpc.Channel, method: str, data: bytes) -> grpc.StatusCode:
    path = f"/{SERVICE.full_name}/{method}"
    try:
        if METHODS[method].server_streaming:
            stream = channel.unary_stream(path)(data, timeout=0.5)
            for _ in zip(range(3), stream, strict=False):
                pass
            stream.cancel()
        else:
            channel.unary_unary(path)(data, timeout=5)
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()  # type: ignore[attr-defined]
        if code is grpc.StatusCode.CANCELLED:
            return grpc.StatusCode.OK
        if code is grpc.StatusCode.INTERNAL and "deserializ" in (err.details() or ""):  # type: ignore[attr-defined]
            return grpc.StatusCode.INVALID_ARGUMENT
        return code
    return grpc.StatusCode.OK


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_random_messages_get_clean_answers(method: str, served: tuple[Served, grpc.Channel]) -> None:
    s, channel = served
    req_cls = getattr(pb, METHODS[method].input_type.name)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(values=message(METHODS[method].input_type))
    def one(values: dict[str, Any]) -> None:
        code = call(channel, method, build(req_cls, values))
        assert code is grpc.StatusCode.OK or code in CLEAN, f"{method} {values!r} → {code}"

    one()
    _still_serving(s, channel)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_garbage_bytes_get_clean_answers(method: str, served: tuple[Served, grpc.Channel]) -> None:
    s, channel = served

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.binary(max_size=300))
    def one(data: bytes) -> None:
        code = call(channel, method, data)
        assert code is grpc.StatusCode.OK or code in CLEAN, f"{method} {data!r} → {code}"

    one()
    _still_serving(s, channel)


def _still_serving(s: Served, channel: grpc.Channel) -> None:
    assert pb.Status.FromString(channel.unary_unary(f"/{SERVICE.full_name}/GetStatus")(b"", timeout=5))
    allowed = {"agent.sock", "admin.sock", "state", "state/state.json", "state/state.json.epoch"}
    extra = _files(s.dir) - allowed
    assert not extra, f"unexpected files written: {sorted(extra)}"
