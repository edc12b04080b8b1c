"""Helpers for the API security tests: a served in-process ledger on a real unix socket in a short dir."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

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
