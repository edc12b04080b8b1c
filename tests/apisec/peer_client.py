"""Calls the node API as another user: imports as root (the interpreter lives in root's home), then drops
to `uid`/`gid` before connecting, so the agent's SO_PEERCRED sees that user. Prints one JSON object:
method → gRPC status code name ("OK" when answered)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import grpc

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc

FENCE = pb.Fence(scheduler_id="peer-test", scheduler_epoch=7)
CALLS = {
    "GetSnapshot": lambda s: s.GetSnapshot(pb.GetSnapshotRequest(), timeout=5),
    "GetStatus": lambda s: s.GetStatus(pb.GetStatusRequest(), timeout=5),
    "Admit": lambda s: s.Admit(pb.AdmitRequest(fence=FENCE, allocation=pb.AllocationSpec(
        key="local/batch/x", application_id="app-x", source=pb.SOURCE_LOCAL,
        resources=pb.Resources(milli_cpu=100, memory_bytes=1 << 20))), timeout=5),
    "Drain": lambda s: s.Drain(pb.DrainRequest(fence=FENCE, mode=pb.DRAIN_MODE_FORCEFUL, timeout_seconds=0),
                               timeout=5),
    "AckRecovery": lambda s: s.AckRecovery(pb.AckRecoveryRequest(fence=FENCE, incarnation="x"), timeout=5),
    "Recommission": lambda s: s.Recommission(pb.RecommissionRequest(fence=FENCE), timeout=5),
    "Record": lambda s: s.Record(pb.RecordRequest(seconds=0), timeout=5),
}


async def main(socket_path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    async with grpc.aio.insecure_channel(f"unix:{socket_path}") as ch:
        stub = pb_grpc.NodeAgentStub(ch)
        for name, call in CALLS.items():
            try:
                await call(stub)
                out[name] = "OK"
            except grpc.aio.AioRpcError as err:
                out[name] = err.code().name
    return out


if __name__ == "__main__":
    path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    print(json.dumps(asyncio.run(main(path))))
