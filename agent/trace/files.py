"""Trace files: `trace-<n>.ctr`, each a header line and one zlib stream of JSON lines, one record a line.

The writer runs on its own thread, so the tick never waits for the disk nor for the encoding to text: the
tick hands it a record (`put`: a deque append, no lock, no wake-up) and the thread takes what is queued
every `flush_s`, turns it into JSON, compresses it (zlib lets go of the GIL meanwhile) and writes it. A
full queue (a disk slower than the ticks) drops the record, counts it, and asks the recorder for a new file
(`need_new_file`), since a file must replay from its first line on. Past `file_bytes` the recorder begins
the next file too; past `files` files the oldest is deleted. Each file begins with a header record
(settings and the policies' state), so a file copied off on its own replays.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from agent.trace.codec import TraceError

log = logging.getLogger("coloc.trace")

MAGIC = b"coloc-agent trace 1\n"
_NAME = re.compile(r"^trace-(\d{6,})\.ctr$")


def trace_files(directory: Path) -> list[Path]:
    """The trace files in `directory`, oldest first."""
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _n, p in sorted(found)]


def _line(record: Any) -> bytes:
    data = record if isinstance(record, bytes) else json.dumps(record, separators=(",", ":")).encode()
    return data + b"\n"


class TraceWriter:
    """Writes records to rotating trace files on a thread of its own (see the module's docstring)."""

    def __init__(self, directory: Path, *, file_bytes: int, files: int, queue_lines: int,
                 level: int = 6, flush_s: float = 0.25) -> None:
        self.directory = directory
        self._file_bytes = file_bytes
        self._files = files
        self._level = level
        self._flush_s = flush_s
        self._max = queue_lines
        self._q: deque[tuple[Any, bool]] = deque()
        self.dropped = 0  # records dropped: the disk was slower than the ticks, or could not be written
        self.errors = 0
        self._in_file = 0  # compressed bytes in the current file (read by the recorder's thread)
        self._lost = False
        self._fresh = True  # the current file has no header yet
        self._f: BinaryIO | None = None
        self._comp: Any = None
        self._next = 0
        self._closing = threading.Event()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # the node's workloads, by name: root's
        existing = trace_files(directory)
        if existing:
            m = _NAME.match(existing[-1].name)
            assert m is not None
            self._next = int(m.group(1)) + 1
        self._thread = threading.Thread(target=self._run, name="coloc-trace", daemon=True)
        self._thread.start()

    @property
    def need_new_file(self) -> bool:
        """The current file is full, or a record was lost: the next record should begin a new file."""
        return self._lost or self._in_file >= self._file_bytes

    def put(self, record: Any, *, new_file: bool = False) -> bool:
        """Queue one record (a JSON-able value, or a line's bytes); False when it was dropped."""
        if new_file:
            self._lost = False
            self._in_file = 0
        if len(self._q) >= self._max:
            self.dropped += 1
            self._lost = True
            return False
        self._q.append((record, new_file))
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued and close the file."""
        self._closing.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("trace: the writer did not finish in time; what it had queued is lost")

    def _run(self) -> None:
        while True:
            closing = self._closing.wait(self._flush_s)
            self._drain()
            if closing:
                break
        if self._f is not None:
            try:
                self._finish()
            except OSError as err:
                log.warning("trace: closing failed", extra={"fields": {"error": str(err)}})

    def _drain(self) -> None:
        q = self._q
        wrote = False
        while q:
            record, new_file = q.popleft()
            try:
                if new_file or self._f is None:
                    if self._f is not None:
                        self._finish()
                    self._open()
                if self._fresh and not new_file:
                    continue  # a file must begin with a header: records before one are of no use
                self._fresh = False
                self._write(self._comp.compress(_line(record)))
                wrote = True
            except OSError as err:
                self._failed(err)
        if wrote and self._f is not None:
            try:
                self._write(self._comp.flush(zlib.Z_SYNC_FLUSH))
                self._f.flush()
            except OSError as err:
                self._failed(err)

    def _failed(self, err: OSError) -> None:
        self.errors += 1
        self.dropped += 1
        self._lost = True
        if self.errors <= 3:
            log.warning("trace: writing failed", extra={"fields": {"error": str(err)}})
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()
        self._f = self._comp = None

    def _open(self) -> None:
        path = self.directory / f"trace-{self._next:06d}.ctr"
        self._next += 1
        self._f = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb")
        self._f.write(MAGIC)
        self._in_file = len(MAGIC)
        self._fresh = True
        self._comp = zlib.compressobj(self._level)
        for old in trace_files(self.directory)[:-self._files]:
            old.unlink(missing_ok=True)

    def _write(self, data: bytes) -> None:
        assert self._f is not None
        self._f.write(data)
        self._in_file += len(data)

    def _finish(self) -> None:
        assert self._f is not None
        f, self._f = self._f, None
        f.write(self._comp.flush())
        f.close()


def read_lines(path: Path) -> Iterator[bytes]:
    """The lines of one trace file; a last line cut short (a file still being written) is left out."""
    try:
        with path.open("rb") as f:
            head = f.read(len(MAGIC))
            if head != MAGIC:
                raise TraceError(f"{path}: not a coloc-agent trace file")
            dec = zlib.decompressobj()
            rest = b""
            while chunk := f.read(1 << 20):
                try:
                    data = dec.decompress(chunk)
                except zlib.error as err:
                    raise TraceError(f"{path}: damaged: {err}") from None
                lines = (rest + data).split(b"\n")
                rest = lines.pop()
                yield from lines
    except OSError as err:
        raise TraceError(f"{path}: cannot read: {err.strerror}") from None
