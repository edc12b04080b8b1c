"""Issue 13 item 6: reflection v1 beside v1alpha, `Identity.agent_version`, a relative `--socket` path.

A real server on a real unix socket; a third-party reflection client (PyPI grpc-requests), our own v1 call,
and the real `coloc-agent status` CLI in a subprocess.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import sys
from pathlib import Path

import grpc
from apiseckit import serving
from grpc_reflection.v1alpha import reflection_pb2

from agent.api.client import AgentClient

REPO = Path(__file__).resolve().parents[2]
V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


async def test_reflection_v1_lists_and_describes_the_api() -> None:
    async with serving() as s, grpc.aio.insecure_channel(f"unix:{s.socket}") as ch:
        # The v1 messages are the v1alpha ones on the wire; a v1-only client sends exactly these bytes.
        req, resp = reflection_pb2.ServerReflectionRequest, reflection_pb2.ServerReflectionResponse
        call = ch.stream_stream(V1, request_serializer=req.SerializeToString,
                                response_deserializer=resp.FromString)()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        listed = await call.read()
        await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol="coloc.v1.NodeAgent"))
        described = await call.read()
        await call.done_writing()
    names = {x.name for x in listed.list_services_response.service}
    assert {"coloc.v1.NodeAgent", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto  # the API's descriptors


async def test_a_third_party_reflection_client_lists_and_calls_the_api() -> None:
    from grpc_requests import Client

    async with serving() as s:
        def use() -> tuple[list[str], dict[str, object]]:
            client = Client(f"unix:{s.socket}")
            try:
                return list(client.service_names), client.request("coloc.v1.NodeAgent", "GetStatus", {})
            finally:
                client.channel.close()

        names, status = await asyncio.to_thread(use)
    assert "coloc.v1.NodeAgent" in names
    assert status["identity"]["node_id"] == "node-sec"  # type: ignore[index]


async def test_agent_version_is_filled_and_status_accepts_a_relative_socket() -> None:
    version = importlib.metadata.version("coloc-agent")
    async with serving() as s:
        async with AgentClient(s.socket) as c:
            assert (await c.get_snapshot()).identity.agent_version == version
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent.cli", "status", "--socket", "agent.sock", "--json", cwd=s.dir,
            env={"PYTHONPATH": str(REPO)}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(run.communicate(), 60)
    assert run.returncode == 0, err.decode()[-2000:]
    assert json.loads(out)["identity"]["agent_version"] == version
