"""Config of the trace (`trace:`): what each tick's policies saw and decided, written to rotating files for
`coloc-agent replay` (docs/replay.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from agent.config.load import ConfigError
from qos.validation import bounded, check_bounds

__all__ = ["TraceConfig"]


@dataclass(frozen=True)
class TraceConfig:
    """Recording a trace of every tick. Off by default. The files are `trace-<n>.ctr` in `dir`, each one
    readable on its own; at most `files` of at most `file_mb` each are kept (the oldest goes), so the trace
    never holds more than their product on the node's disk."""

    enabled: bool = False  # record each tick's inputs, settings and decisions
    dir: str = "/var/lib/coloc-agent/trace"  # the directory of the trace files (absolute)
    file_mb: float = bounded(64.0, 0.001, 4096.0)  # a file is closed and the next begun past this size (MB)
    files: int = bounded(8, 1, 1000)  # trace files kept at most, the newest
    # ticks waiting for the disk at most; past that, ticks are dropped (and counted) rather than wait
    queue_ticks: int = bounded(256, 1, 100_000)
    level: int = bounded(6, 1, 9)  # zlib's compression level

    def __post_init__(self) -> None:
        check_bounds(self, "trace", ConfigError)
        if self.enabled and not os.path.isabs(self.dir):
            raise ConfigError(f"trace.dir: must be absolute, got {self.dir!r}")
