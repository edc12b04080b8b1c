"""Audit records: one JSON line per action with its reason and the numbers that caused it."""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict

from agent.published import ActionRecord

log = logging.getLogger("coloc.audit")


def record_to_json(rec: ActionRecord) -> str:
    d = asdict(rec)
    d["numbers"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.numbers.items()}
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


class AuditLog:
    """Appends records to a JSON-lines file (if configured) and logs each at INFO."""

    def __init__(self, path: str = "") -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

    def __call__(self, rec: ActionRecord) -> None:
        line = record_to_json(rec)
        log.info("action", extra={"fields": {"audit": json.loads(line)}})
        if self._fd is not None:
            with self._lock:
                os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
