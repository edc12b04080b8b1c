"""The pinned YuniKorn scheduler interface, compiled for the tests: `tests/vendor/yunikorn/si.proto` from
apache/yunikorn-scheduler-interface v1.8.0 (commit f119c600, see tests/vendor/README.md), compiled with the
protoc bundled in grpcio-tools into a temporary directory. Every line `recover --json-yunikorn` prints is
parsed as the si message it names with `json_format.ParseDict(..., ignore_unknown_fields=False)`."""

from __future__ import annotations

import atexit
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc_tools
from google.protobuf import json_format
from google.protobuf.message import Message

VENDOR = Path(__file__).resolve().parents[1] / "vendor" / "yunikorn"
SI_PROTO = VENDOR / "si.proto"
SI_VERSION = "v1.8.0"  # apache/yunikorn-scheduler-interface tag of the vendored si.proto
SI_SHA256 = "ff800def68cdfb7e21a588041ee1527e97a7b4f74d1cd80ccaa5b9e69bf4059d"

_compiled: ModuleType | None = None


def si_pb2() -> ModuleType:
    """The generated module, compiled once per test process (the descriptor pool takes a file only once)."""
    global _compiled
    if _compiled is None:
        out = Path(tempfile.mkdtemp(prefix="coloc-si-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        include = Path(grpc_tools.__file__).parent / "_proto"
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{VENDOR}", f"-I{include}",
                        f"--python_out={out}", str(SI_PROTO)], check=True, capture_output=True, text=True)
        spec = importlib.util.spec_from_file_location("coloc_test_si_pb2", out / "si_pb2.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _compiled = module
    return _compiled


def parse_line(line: str) -> tuple[str, Message]:
    """One printed line `{"<SiMessageName>": {...}}` → (name, the parsed si.v1 message)."""
    obj: Any = json.loads(line)
    assert isinstance(obj, dict) and len(obj) == 1, f"not one si message by name: {line[:120]}"
    name, body = next(iter(obj.items()))
    cls = getattr(si_pb2(), name, None)
    assert isinstance(cls, type) and issubclass(cls, Message), f"si.v1 has no message {name!r}"
    return name, json_format.ParseDict(body, cls(), ignore_unknown_fields=False)


def parse_output(text: str) -> list[tuple[str, Message]]:
    """Every non-empty line of the output, parsed; raises on the first line si.proto does not accept."""
    return [parse_line(line) for line in text.splitlines() if line.strip()]


def as_dict(msg: Message) -> dict[str, Any]:
    """The parsed message back in the JSON mapping (what the si.proto accepted, not what was printed)."""
    return json_format.MessageToDict(msg)
