"""Node-wide CPU (from /proc/stat deltas) and memory (from /proc/meminfo)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from cgroups.errors import from_oserror
from cgroups.parsers import MemInfo, ProcStat, parse_meminfo, parse_proc_stat


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise from_oserror(e, path, "read") from None


def read_proc_stat(proc_root: Path = Path("/proc")) -> ProcStat:
    path = proc_root / "stat"
    return parse_proc_stat(_read(path), str(path))


def read_meminfo(proc_root: Path = Path("/proc")) -> MemInfo:
    """MemTotal, MemAvailable, MemFree in bytes; `.used_bytes` is MemTotal − MemAvailable."""
    path = proc_root / "meminfo"
    return parse_meminfo(_read(path), str(path))


@dataclass(frozen=True, slots=True)
class NodeCpu:
    """CPU the whole node used over one interval."""

    milli_cpu: float  # 1000 = one core busy for the whole interval
    interval_s: float
    ncpu: int

    @property
    def utilisation(self) -> float:
        """0..1 of the node's capacity."""
        return self.milli_cpu / (self.ncpu * 1000) if self.ncpu else 0.0


class NodeCpuMeter:
    """Turns successive /proc/stat readings into milli-cores used per interval."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc_root = proc_root
        self._prev: ProcStat | None = None
        self._prev_at = 0.0

    def update(self) -> NodeCpu | None:
        """Read /proc/stat; return usage since the previous call (None on the first call)."""
        now = time.monotonic()
        cur = read_proc_stat(self.proc_root)
        prev, prev_at = self._prev, self._prev_at
        self._prev, self._prev_at = cur, now
        if prev is None:
            return None
        total = cur.cpu.total - prev.cpu.total
        busy = cur.cpu.busy - prev.cpu.busy
        if total <= 0:
            return NodeCpu(0.0, now - prev_at, cur.ncpu)
        # Ticks ratio × cpus: independent of USER_HZ and of how late this call ran.
        return NodeCpu(max(0, busy) / total * cur.ncpu * 1000, now - prev_at, cur.ncpu)
