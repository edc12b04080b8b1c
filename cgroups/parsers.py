"""Pure parsers: bytes of a cgroup or /proc file -> frozen dataclass. No I/O here.

Every parser takes the file name for its error message; an unexpected shape raises UnknownFormat
naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from cgroups.errors import UnknownFormat

# v1 reports "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 with 4 KiB pages).
UNLIMITED_THRESHOLD = 1 << 62


def _line_of(data: bytes, pos: int) -> tuple[int, bytes]:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return data.count(b"\n", 0, start) + 1, data[start : end if end >= 0 else len(data)]


def _first_line(data: bytes) -> bytes:
    return data.split(b"\n", 1)[0]


def parse_int(data: bytes, file: str) -> int:
    """A file holding one integer (cpuacct.usage, memory.current, pids.current, ...)."""
    try:
        return int(data)
    except ValueError:
        raise UnknownFormat(file, 1, _first_line(data), "expected one integer") from None


def kv_int(data: bytes, key: bytes, file: str) -> int:
    """Value of `key` in a flat "key value" file, found without splitting the whole file."""
    if data.startswith(key + b" "):
        pos = 0
    else:
        pos = data.find(b"\n" + key + b" ")
        if pos < 0:
            raise UnknownFormat(file, 1, _first_line(data), f"no {key.decode()!r} key")
        pos += 1
    start = pos + len(key) + 1
    end = data.find(b"\n", start)
    raw = data[start:end] if end >= 0 else data[start:]
    try:
        return int(raw)
    except ValueError:
        line_no, line = _line_of(data, pos)
        raise UnknownFormat(file, line_no, line, "value is not an integer") from None


def parse_kv(data: bytes, file: str) -> dict[str, int]:
    """A whole flat "key value" file (cpu.stat, memory.stat) as a dict."""
    out: dict[str, int] = {}
    for no, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise UnknownFormat(file, no, line, "expected 'key value'")
        try:
            out[parts[0].decode()] = int(parts[1])
        except ValueError:
            raise UnknownFormat(file, no, line, "value is not an integer") from None
    return out


@dataclass(frozen=True, slots=True)
class CpuStat:
    """Throttling counters (and v2's usage) from cpu.stat; times in nanoseconds."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int
    usage_ns: int | None = None


def parse_cpu_stat_v1(data: bytes, file: str = "cpu.stat") -> CpuStat:
    kv = parse_kv(data, file)
    try:
        return CpuStat(kv["nr_periods"], kv["nr_throttled"], kv["throttled_time"])
    except KeyError as missing:
        raise UnknownFormat(file, 1, _first_line(data), f"no {missing} key (v1 cpu.stat)") from None


def parse_cpu_stat_v2(data: bytes, file: str = "cpu.stat") -> CpuStat:
    kv = parse_kv(data, file)
    if "usage_usec" not in kv:
        raise UnknownFormat(file, 1, _first_line(data), "no 'usage_usec' key (v2 cpu.stat)")
    # Without the cpu controller enabled, v2 cpu.stat has only the usage lines: no throttling then.
    return CpuStat(
        kv.get("nr_periods", 0),
        kv.get("nr_throttled", 0),
        kv.get("throttled_usec", 0) * 1000,
        kv["usage_usec"] * 1000,
    )


def parse_memory_limit(data: bytes, file: str) -> int | None:
    """memory.max / memory.high ("max") or v1 *_limit_in_bytes (huge = none); None means unlimited."""
    if data.strip() == b"max":
        return None
    value = parse_int(data, file)
    return None if value >= UNLIMITED_THRESHOLD or value < 0 else value


@dataclass(frozen=True, slots=True)
class CpuMax:
    """A CFS bandwidth limit; quota None means unlimited."""

    quota_us: int | None
    period_us: int


def parse_cpu_max(data: bytes, file: str = "cpu.max") -> CpuMax:
    parts = data.split()
    if len(parts) != 2:
        raise UnknownFormat(file, 1, _first_line(data), "expected '<quota|max> <period>'")
    try:
        quota = None if parts[0] == b"max" else int(parts[0])
        return CpuMax(quota, int(parts[1]))
    except ValueError:
        raise UnknownFormat(file, 1, _first_line(data), "expected '<quota|max> <period>'") from None


def parse_cfs(quota: bytes, period: bytes) -> CpuMax:
    """v1 cpu.cfs_quota_us (-1 = none) and cpu.cfs_period_us."""
    q = parse_int(quota, "cpu.cfs_quota_us")
    return CpuMax(None if q < 0 else q, parse_int(period, "cpu.cfs_period_us"))


@dataclass(frozen=True, slots=True)
class Psi:
    """One pressure file: `some` and (where the kernel reports it) `full`; avg in %, totals in µs."""

    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_us: int
    full_avg10: float | None = None
    full_avg60: float | None = None
    full_avg300: float | None = None
    full_total_us: int | None = None


def _psi_line(tokens: list[bytes], at: int, kind: bytes) -> tuple[float, ...]:
    if (
        tokens[at] != kind
        or not tokens[at + 1].startswith(b"avg10=")
        or not tokens[at + 2].startswith(b"avg60=")
        or not tokens[at + 3].startswith(b"avg300=")
        or not tokens[at + 4].startswith(b"total=")
    ):
        raise ValueError
    return (
        float(tokens[at + 1][6:]),
        float(tokens[at + 2][6:]),
        float(tokens[at + 3][7:]),
        int(tokens[at + 4][6:]),
    )


def parse_psi(data: bytes, file: str = "cpu.pressure") -> Psi:
    """`some avg10=0.00 avg60=0.00 avg300=0.00 total=0` and optionally the same for `full`."""
    tokens = data.split()
    try:
        if len(tokens) not in (5, 10):
            raise ValueError
        some = _psi_line(tokens, 0, b"some")
        if len(tokens) == 5:
            return Psi(some[0], some[1], some[2], int(some[3]))
        try:
            full = _psi_line(tokens, 5, b"full")
        except ValueError:
            raise UnknownFormat(file, 2, data.split(b"\n")[1], "expected a 'full ...' line") from None
        return Psi(some[0], some[1], some[2], int(some[3]), full[0], full[1], full[2], int(full[3]))
    except (ValueError, IndexError):
        why = "expected 'some avg10=.. avg60=.. avg300=.. total=..'"
        raise UnknownFormat(file, 1, _first_line(data), why) from None


_PSI_AVGS = rb"avg10=\d+\.\d\d avg60=\d+\.\d\d avg300=\d+\.\d\d total="
_PSI_KERNEL = re.compile(rb"some " + _PSI_AVGS + rb"(\d+)\n(?:full " + _PSI_AVGS + rb"\d+\n)?")


def psi_some_total(data: bytes, file: str = "cpu.pressure") -> int:
    """`parse_psi(data, file).some_total_us`, without building the rest when the file is as the kernel
    writes it (a stall share is read from every HP cgroup each tick); anything else goes to `parse_psi`."""
    m = _PSI_KERNEL.fullmatch(data)
    return int(m.group(1)) if m is not None else parse_psi(data, file).some_total_us


def format_psi(psi: Psi) -> bytes:
    """The kernel's text for `psi` (used to lay out v2 trees in tests)."""
    out = (
        f"some avg10={psi.some_avg10:.2f} avg60={psi.some_avg60:.2f} "
        f"avg300={psi.some_avg300:.2f} total={psi.some_total_us}\n"
    )
    if psi.full_total_us is not None:
        out += (
            f"full avg10={psi.full_avg10 or 0:.2f} avg60={psi.full_avg60 or 0:.2f} "
            f"avg300={psi.full_avg300 or 0:.2f} total={psi.full_total_us}\n"
        )
    return out.encode()


def parse_cpuset(data: bytes | str, file: str = "cpuset.cpus") -> tuple[int, ...]:
    """A cpu list like "0-3,5" (empty = no cpus) as sorted unique cpu numbers."""
    text = data.decode() if isinstance(data, bytes) else data
    text = text.strip()
    cpus: set[int] = set()
    if not text:
        return ()
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if dash else first
        except ValueError:
            raise UnknownFormat(file, 1, text, f"bad cpu range {part!r}") from None
        if first < 0 or last < first:
            raise UnknownFormat(file, 1, text, f"bad cpu range {part!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpuset(cpus: Iterable[int]) -> str:
    """The kernel's canonical list form: sorted, ranges collapsed ("0-3,5")."""
    ordered = sorted(set(cpus))
    if any(c < 0 for c in ordered):
        raise ValueError(f"cpu numbers must be >= 0, got {ordered}")
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def parse_procs(data: bytes, file: str = "cgroup.procs") -> tuple[int, ...]:
    """cgroup.procs / tasks: one pid per line."""
    try:
        return tuple(int(x) for x in data.split())
    except ValueError:
        for no, line in enumerate(data.splitlines(), start=1):
            if not line.strip().isdigit():
                raise UnknownFormat(file, no, line, "expected one pid per line") from None
        raise


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate `cpu` line of /proc/stat, in clock ticks."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def busy(self) -> int:
        return self.user + self.nice + self.system + self.irq + self.softirq + self.steal

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.iowait


@dataclass(frozen=True, slots=True)
class ProcStat:
    cpu: CpuTimes
    ncpu: int


def parse_proc_stat(data: bytes, file: str = "/proc/stat") -> ProcStat:
    lines = data.split(b"\n")
    head = lines[0].split()
    if len(head) < 9 or head[0] != b"cpu":
        raise UnknownFormat(file, 1, lines[0], "expected 'cpu user nice system idle iowait irq softirq ...'")
    try:
        times = CpuTimes(*(int(x) for x in head[1:9]))
    except ValueError:
        raise UnknownFormat(file, 1, lines[0], "cpu times are not integers") from None
    ncpu = sum(1 for line in lines[1:] if line.startswith(b"cpu"))
    return ProcStat(times, max(ncpu, 1))


@dataclass(frozen=True, slots=True)
class MemInfo:
    total_bytes: int
    available_bytes: int
    free_bytes: int

    @property
    def used_bytes(self) -> int:
        """MemTotal − MemAvailable: what the node cannot hand out without reclaiming working sets."""
        return self.total_bytes - self.available_bytes


def parse_meminfo(data: bytes, file: str = "/proc/meminfo") -> MemInfo:
    values: dict[bytes, int] = {}
    for no, line in enumerate(data.splitlines(), start=1):
        key, sep, rest = line.partition(b":")
        if not sep:
            raise UnknownFormat(file, no, line, "expected 'Key: value [kB]'")
        if key in (b"MemTotal", b"MemAvailable", b"MemFree"):
            parts = rest.split()
            try:
                values[key] = int(parts[0]) * (1024 if parts[1:] == [b"kB"] else 1)
            except (ValueError, IndexError):
                raise UnknownFormat(file, no, line, "value is not an integer") from None
    try:
        return MemInfo(values[b"MemTotal"], values[b"MemAvailable"], values[b"MemFree"])
    except KeyError as missing:
        raise UnknownFormat(file, 1, _first_line(data), f"no {missing.args[0].decode()} line") from None
