"""The loop's trace hook: recording when the config turns it on (`trace.enabled`), or for a while when an
operator asks over the admin socket (`Record`, `coloc-agent record --minutes N`).

The hook itself (`record`) runs on the loop's thread and does no I/O: opening the files is `open_writer`'s,
which the API runs on a thread of its own before it hands the writer over (`start`), and closing them is a
thread's too. When the time asked for is up the recording stops at the next tick, unless the config keeps it
on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.config.trace import TraceConfig
from agent.trace.files import TraceWriter
from agent.trace.params import TickSettings
from agent.trace.recorder import Judged, TickRecorder, TickTrace


@dataclass(frozen=True, slots=True)
class Recording:
    """What the switch is doing: recording or not, until when (wall clock; None: as long as the config
    says), where, and the ticks recorded since it began."""

    on: bool
    until: float | None
    dir: str
    ticks: int
    dropped: int


class TraceSwitch:
    def __init__(self, cfg: TraceConfig, settings: Callable[[], TickSettings],
                 judged: Callable[[], list[Judged]], node: str,
                 clock: Callable[[], float] = time.time,
                 origins: Callable[[], Mapping[str, str]] = dict) -> None:
        self._cfg = cfg
        self._settings = settings
        self._judged = judged
        self._node = node
        self._clock = clock
        self._origins = origins
        self._recorder: TickRecorder | None = None
        self._until: float | None = None

    @property
    def recorder(self) -> TickRecorder | None:
        return self._recorder

    def open_writer(self) -> TraceWriter:
        """The trace's files, opened (I/O: not on the loop's thread). Raises OSError."""
        c = self._cfg
        return TraceWriter(Path(c.dir), file_bytes=int(c.file_mb * 1e6), files=c.files,
                           queue_lines=c.queue_ticks, level=c.level)

    def start(self, writer: TraceWriter | None, seconds: float | None) -> Recording:
        """Record through `writer` (None: the one in use) for `seconds` (None: until stopped)."""
        if self._recorder is None:
            if writer is None:
                raise ValueError("no trace writer to record with")
            self._recorder = TickRecorder(writer, self._settings, self._judged, self._node, self._origins)
        elif writer is not None:
            _close_later(writer)  # one was opened meanwhile: the recording in use goes on
        if not self._cfg.enabled:
            self._until = None if seconds is None else self._clock() + seconds
        return self.state()

    def stop(self) -> Recording:
        """Stop recording now (a trace the config turns on goes on)."""
        if not self._cfg.enabled:
            self._until = self._clock()
            self._expire()
        return self.state()

    def state(self) -> Recording:
        r = self._recorder
        return Recording(r is not None, None if self._cfg.enabled else self._until, self._cfg.dir,
                         r.ticks if r is not None else 0, r.dropped if r is not None else 0)

    def record(self, t: TickTrace) -> None:
        """The loop's hook."""
        self._expire()
        if self._recorder is not None:
            self._recorder.record(t)

    def _expire(self) -> None:
        if self._recorder is not None and self._until is not None and self._clock() >= self._until:
            recorder, self._recorder, self._until = self._recorder, None, None
            _close_later(recorder)

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None


def _close_later(closable: TraceWriter | TickRecorder) -> None:
    """Write what is queued and close the files on a thread: never on the loop's."""
    threading.Thread(target=closable.close, name="coloc-trace-close", daemon=True).start()
