"""Helpers for the API security tests: a served in-process ledger on a real unix socket in a short dir."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from kit.fakes.tls import openssl

from agent.api.server import ApiServer, start_api_server
from agent.config.api import ApiConfig
from agent.state import Ledger, LedgerConfig


@dataclass
class Served:
    ledger: Ledger
    server: ApiServer
    dir: Path

    @property
    def socket(self) -> str:
        return str(self.dir / "agent.sock")

    @property
    def admin_socket(self) -> str:
        return str(self.dir / "admin.sock")


def short_dir() -> Path:
    """A fresh directory with a short path (unix socket paths are limited to 107 bytes), readable by all."""
    d = Path(tempfile.mkdtemp(prefix="coloc-sec-", dir="/tmp"))
    d.chmod(0o755)
    return d


@asynccontextmanager
async def serving(queue: int = 1024, ledger_cfg: dict[str, object] | None = None,
                  **api: object) -> AsyncIterator[Served]:
    """A ledger with its state file and the API server on `<dir>/agent.sock` (unless `api` says otherwise)."""
    d = short_dir()
    try:
        ledger = Ledger.open(LedgerConfig(node_id="node-sec", state_path=str(d / "state" / "state.json"),
                                          watch_queue_size=queue, **ledger_cfg or {}))  # type: ignore[arg-type]
        ledger.start_persistence()
        api.setdefault("socket_path", str(d / "agent.sock"))
        server = await start_api_server(ledger, ApiConfig(**api))  # type: ignore[arg-type]
        try:
            yield Served(ledger, server, d)
        finally:
            await server.stop(0)
            await ledger.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NOBODY = 65534
MUTATIONS = ("Admit", "Drain", "AckRecovery", "Recommission", "Record")


async def as_user(socket_path: str, uid: int, gid: int) -> dict[str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "peer_client.py"), socket_path, str(uid), str(gid), cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    result: dict[str, str] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def make_pki(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1, client certificates `scheduler-1` and `intruder`, and a
    client certificate from another CA."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-days", "2", "-subj", f"/CN={ca}", "-keyout", str(d / f"{ca}.key"),
                 "-out", str(d / f"{ca}.pem"))
    for name, ca, ext in (("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                          ("scheduler-1", "ca", None), ("intruder", "ca", None),
                          ("stranger", "other-ca", None)):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", f"/CN={name}",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))
        extra = []
        if ext:
            (d / f"{name}.ext").write_text(ext + "\n")
            extra = ["-extfile", str(d / f"{name}.ext")]
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.pem"), "-CAkey",
                 str(d / f"{ca}.key"), "-CAcreateserial", "-days", "2", "-out", str(d / f"{name}.pem"),
                 *extra)
