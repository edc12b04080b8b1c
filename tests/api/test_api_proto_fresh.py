"""The checked-in generated code is exactly what scripts/gen_proto makes from agent.proto."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py", "agent_pb2_grpc.pyi")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(REPO / "scripts" / "gen_proto"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert run.returncode == 0, run.stderr
    for name in GENERATED:
        fresh = (tmp_path / "agent" / "api" / "coloc" / "v1" / name).read_bytes()
        checked_in = (REPO / "agent" / "api" / "coloc" / "v1" / name).read_bytes()
        assert fresh == checked_in, f"{name} is stale: run scripts/gen_proto and commit the result"


def test_generated_imports_work_inside_the_package() -> None:
    from agent.api.coloc.v1 import agent_pb2, agent_pb2_grpc

    assert agent_pb2.DESCRIPTOR.package == "coloc.v1"
    assert agent_pb2_grpc.NodeAgentStub.__module__ == "agent.api.coloc.v1.agent_pb2_grpc"
    service = agent_pb2.DESCRIPTOR.services_by_name["NodeAgent"]
    assert [m.name for m in service.methods] == [
        "GetSnapshot",
        "Watch",
        "AckRecovery",
        "Admit",
        "GetStatus",
        "Drain",
        "Recommission",
        "Record",
    ]
