"""Trace files: `trace-<n>.ctr`, each a header line and one zlib stream of JSON lines, one record a line.

The writer runs on its own thread, so the tick never waits for the disk: the tick hands it a line
(`put`, never blocking); a full queue (a disk slower than the ticks) drops the line, counts it, and asks the
recorder for a new file (`need_new_file`), since a file must be replayable from its first line on. Past
`file_bytes` the recorder begins the next file too; past `files` files the oldest is deleted. Each file
begins with a header record (settings and the policies' state), so a file copied off on its own replays.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent.trace.codec import TraceError

log = logging.getLogger("coloc.trace")

MAGIC = b"coloc-agent trace 1\n"
_NAME = re.compile(r"^trace-(\d{6,})\.ctr$")


@dataclass(frozen=True, slots=True)
class _Line:
    data: bytes
    new_file: bool


def trace_files(directory: Path) -> list[Path]:
    """The trace files in `directory`, oldest first."""
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _n, p in sorted(found)]


class TraceWriter:
    """Writes lines to rotating trace files on a thread of its own (see the module's docstring)."""

    def __init__(self, directory: Path, *, file_bytes: int, files: int, queue_lines: int,
                 level: int = 6) -> None:
        self.directory = directory
        self._file_bytes = file_bytes
        self._files = files
        self._level = level
        self._q: queue.Queue[_Line | None] = queue.Queue(maxsize=queue_lines)
        self.dropped = 0  # lines dropped: the disk was slower than the ticks, or could not be written
        self.errors = 0
        self._in_file = 0  # compressed bytes in the current file (read by the recorder's thread)
        self._lost = False
        self._next = 0
        directory.mkdir(parents=True, exist_ok=True)
        existing = trace_files(directory)
        if existing:
            m = _NAME.match(existing[-1].name)
            assert m is not None
            self._next = int(m.group(1)) + 1
        self._thread = threading.Thread(target=self._run, name="coloc-trace", daemon=True)
        self._thread.start()

    @property
    def need_new_file(self) -> bool:
        """The current file is full, or a line was lost: the next line should begin a new file."""
        return self._lost or self._in_file >= self._file_bytes

    def put(self, data: bytes, *, new_file: bool = False) -> bool:
        """Queue one line (no newline); False when it was dropped."""
        if new_file:
            self._lost = False
            self._in_file = 0
        try:
            self._q.put_nowait(_Line(data, new_file))
        except queue.Full:
            self.dropped += 1
            self._lost = True
            return False
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued and close the file."""
        try:
            self._q.put(None, timeout=timeout_s)
        except queue.Full:
            log.warning("trace: the writer did not drain its queue in time; closing without it")
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        f: BinaryIO | None = None
        comp: zlib._Compress | None = None
        while True:
            item = self._q.get()
            try:
                if item is None:
                    break
                if item.new_file or f is None or comp is None:
                    if f is not None and comp is not None:
                        self._finish(f, comp)
                    f, comp = self._open()
                if not item.new_file and self._fresh:
                    continue  # a file must begin with a header: lines before one are of no use
                self._fresh = False
                self._write(f, comp.compress(item.data + b"\n"))
                if self._q.empty():
                    self._write(f, comp.flush(zlib.Z_SYNC_FLUSH))
                    f.flush()
            except OSError as err:
                self.errors += 1
                self.dropped += 1
                self._lost = True
                if self.errors <= 3:
                    log.warning("trace: writing failed", extra={"fields": {"error": str(err)}})
                if f is not None:
                    f.close()
                f = comp = None
        if f is not None and comp is not None:
            try:
                self._finish(f, comp)
            except OSError as err:
                log.warning("trace: closing failed", extra={"fields": {"error": str(err)}})

    _fresh = True

    def _open(self) -> tuple[BinaryIO, zlib._Compress]:
        path = self.directory / f"trace-{self._next:06d}.ctr"
        self._next += 1
        f = path.open("wb")
        f.write(MAGIC)
        self._in_file = len(MAGIC)
        self._fresh = True
        for old in trace_files(self.directory)[:-self._files]:
            old.unlink(missing_ok=True)
        return f, zlib.compressobj(self._level)

    def _write(self, f: BinaryIO, data: bytes) -> None:
        f.write(data)
        self._in_file += len(data)

    @staticmethod
    def _finish(f: BinaryIO, comp: zlib._Compress) -> None:
        f.write(comp.flush())
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
                    raise TraceError(f"{path}: damaged after {len(rest)} bytes: {err}") from None
                lines = (rest + data).split(b"\n")
                rest = lines.pop()
                yield from lines
    except OSError as err:
        raise TraceError(f"{path}: cannot read: {err.strerror}") from None
