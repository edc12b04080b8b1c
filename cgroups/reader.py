"""One reader for cgroup v1, v2 and hybrid hosts: usage, throttling, memory, PSI, pids, knobs.

Hot counters are read with `os.pread` on file descriptors kept open per cgroup, and parsed only
for the keys the agent needs. A cgroup that disappears (ENOENT/ENODEV) raises CgroupGone and its
descriptors are dropped; it is a workload that ended, not a fault. Not thread-safe: one reader per
thread (the collector's).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from typing import NamedTuple

from cgroups.discovery import Hierarchy
from cgroups.errors import CgroupError, CgroupGone, UnknownFormat, from_oserror
from cgroups.parsers import (
    UNLIMITED_THRESHOLD,
    Psi,
    kv_int,
    parse_cfs,
    parse_cpu_max,
    parse_cpu_stat_v1,
    parse_cpu_stat_v2,
    parse_cpuset,
    parse_int,
    parse_memory_limit,
    parse_procs,
    parse_psi,
)
from cgroups.paths import check_rel, join

_GONE = (errno.ENOENT, errno.ENODEV)
# One pread takes each file whole: memory.stat is ~1.3 KiB on v1 and ~1.5 KiB on v2.
_SIZES = {"memory.stat": 8192, "cpu.stat": 512, "cpu.pressure": 256, "memory.pressure": 256}
_RETRY_MISSING_S = 10.0  # how long before we look again for a file that was absent (e.g. PSI dir)
_O_FLAGS = os.O_RDONLY | os.O_CLOEXEC
# A memory usage that moved this much since memory.stat was read gets memory.stat read again at once.
MEMORY_STAT_MOVE_BYTES = 1 << 20
_MOVE = MEMORY_STAT_MOVE_BYTES

_pread = os.pread
_monotonic = time.monotonic
_new_sample = tuple.__new__

# Slots of a cgroup's descriptor list.
_USAGE, _CPUSTAT, _MEM, _MEMSTAT, _LIMIT, _PSI_CPU, _PSI_MEM, _PIDS = range(8)


class CgroupSample(NamedTuple):
    """One reading of one cgroup (immutable). Counters are cumulative; compare two samples for rates.

    `at` is time.monotonic(). Memory fields are None where the cgroup has no memory accounting
    (the v2 root, or the memory controller not enabled there); `memory_limit_bytes` None also
    means unlimited (or not read: `memory_limit=False`). Pressure is kept as the file's bytes
    (b"" where the kernel has no pressure file for this cgroup, or it is not read) and parsed by
    `cpu_pressure` / `memory_pressure` on access: the loop needs PSI of a few HP cgroups, not of
    every BE container, and parsing it costs more than reading it. (A NamedTuple because it is
    the cheapest immutable record to build: 0.2 µs against 1.8 µs for a frozen dataclass, measured
    here; this object is built once per cgroup per tick.)
    """

    at: float
    cpu_usage_ns: int
    nr_periods: int
    nr_throttled: int
    throttled_ns: int
    memory_usage_bytes: int | None
    memory_working_set_bytes: int | None
    memory_limit_bytes: int | None
    pids: int | None = None
    cpu_psi_raw: bytes = b""
    memory_psi_raw: bytes = b""

    @property
    def cpu_pressure(self) -> Psi | None:
        return parse_psi(self.cpu_psi_raw, "cpu.pressure") if self.cpu_psi_raw else None

    @property
    def memory_pressure(self) -> Psi | None:
        return parse_psi(self.memory_psi_raw, "memory.pressure") if self.memory_psi_raw else None


@dataclass(frozen=True, slots=True)
class Knobs:
    """The writable knobs of a cgroup as they are now; None where the file does not exist."""

    cpuset: tuple[int, ...] | None
    quota_us: int | None
    period_us: int | None
    cpu_idle: bool | None
    shares: int | None
    weight: int | None
    memory_limit_bytes: int | None
    memory_high_bytes: int | None


def read_size(path: str) -> int:
    """Bytes one pread asks for when sampling this file."""
    return _SIZES.get(path.rpartition("/")[2], 64)


def cpu_milli(prev: CgroupSample, cur: CgroupSample) -> float:
    """Milli-cores used between two samples of the same cgroup."""
    dt = cur.at - prev.at
    if dt <= 0:
        return 0.0
    return max(0, cur.cpu_usage_ns - prev.cpu_usage_ns) / dt / 1e6


def throttled_ratio(prev: CgroupSample, cur: CgroupSample) -> float | None:
    """Share of CFS periods that were throttled between two samples; None if no period elapsed."""
    periods = cur.nr_periods - prev.nr_periods
    if periods <= 0:
        return None
    return max(0, cur.nr_throttled - prev.nr_throttled) / periods


_CpuCounters = tuple[int, int, int, int]  # usage ns, periods, throttled periods, throttled ns


def _cpu_v2(raw_usage: bytes, _raw_cpustat: bytes) -> _CpuCounters:
    """`cpu.stat` of cgroup v2 (usage and throttling in one file); ValueError/IndexError if malformed."""
    t = raw_usage.split()
    if t[0] != b"usage_usec":
        raise ValueError
    if b"nr_periods" not in t:  # absent while the cpu controller is not enabled
        return int(t[1]) * 1000, 0, 0, 0
    i = t.index(b"nr_periods")
    if t[i + 2] != b"nr_throttled" or t[i + 4] != b"throttled_usec":
        raise ValueError
    return int(t[1]) * 1000, int(t[i + 1]), int(t[i + 3]), int(t[i + 5]) * 1000


def _cpu_v1(raw_usage: bytes, raw_cpustat: bytes) -> _CpuCounters:
    """`cpuacct.usage` and `cpu.stat` (b"" where absent) of cgroup v1; ValueError/IndexError if malformed."""
    if not raw_cpustat:
        return int(raw_usage), 0, 0, 0
    t = raw_cpustat.split()
    if t[0] != b"nr_periods" or t[2] != b"nr_throttled" or t[4] != b"throttled_time":
        raise ValueError
    return int(raw_usage), int(t[1]), int(t[3]), int(t[5])


class _Cgroup:
    """Descriptors of one cgroup's files; -1 marks a file that is absent."""

    __slots__ = ("fds", "missing", "retry_at", "stat_due", "stat_inactive", "stat_usage")

    def __init__(self) -> None:
        self.fds = [-1] * 8
        self.missing = False
        self.retry_at = 0.0
        # memory.stat's inactive file pages, the memory usage they were read beside and when to read again
        self.stat_due = 0.0
        self.stat_usage = -1
        self.stat_inactive = 0

    def close(self) -> None:
        for fd in self.fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds = [-1] * 8


class CgroupReader:
    """Reads cgroups named relative to `root` (a path inside every hierarchy, "" for the top).

    `psi=False` skips the two pressure files (a reader for the many BE cgroups, where nobody looks
    at pressure); `memory_psi=False` skips only `memory.pressure`, `memory_limit=False` the memory
    limit file (their sample fields are then b"" and None: one read per cgroup less each, for a
    sampler that does not use them); `count_pids` adds `pids.current` to every sample (one more
    read per cgroup). `throttling=False` skips v1's `cpu.stat` (the throttling counters are then 0;
    on v2 they come with the usage, in the same file).

    `memory_stat_every_s` > 0 reads `memory.stat` (the costliest file: 8 µs against 1.3 µs for the
    usage, here) at most that often while the memory usage stays within `MEMORY_STAT_MOVE_BYTES` of the
    usage it was read beside: the working set is then the usage now less the inactive file pages read
    then. A usage that moves gets a fresh read at once, so the figure can be off only by pages moving
    between the active and inactive lists while the usage holds still, for at most that long.
    """

    def __init__(
        self,
        hierarchy: Hierarchy,
        root: str,
        *,
        psi: bool = True,
        memory_psi: bool = True,
        memory_limit: bool = True,
        count_pids: bool = False,
        throttling: bool = True,
        memory_stat_every_s: float = 0.0,
    ) -> None:
        self.hierarchy = hierarchy
        self.root = check_rel(root, "cgroup root")
        self.throttling = throttling
        self.memory_stat_every_s = memory_stat_every_s
        self.psi = psi
        self.memory_psi = memory_psi
        self.memory_limit = memory_limit
        self.count_pids = count_pids
        self._v2 = hierarchy.mode == "v2"
        self._parse_cpu = _cpu_v2 if self._v2 else _cpu_v1
        self._inactive_key = b"\ninactive_file " if self._v2 else b"\ntotal_inactive_file "
        if self._v2:
            assert hierarchy.unified is not None
            top = str(hierarchy.unified)
            cpu = cpuacct = mem = pids = top
        else:
            for ctrl in ("cpu", "cpuacct", "memory"):
                if ctrl not in hierarchy.v1:
                    raise CgroupError(f"cgroup v1 controller {ctrl!r} is not mounted; the reader needs it")
            cpu = str(hierarchy.v1["cpu"])
            cpuacct = str(hierarchy.v1["cpuacct"])
            mem = str(hierarchy.v1["memory"])
            pids = str(hierarchy.v1["pids"]) if "pids" in hierarchy.v1 else ""
        unified = str(hierarchy.unified) if hierarchy.unified is not None else ""
        r = self.root
        self._anchor = join(cpu if self._v2 else cpuacct, r)
        self._cpu = join(cpu, r)
        self._mem = join(mem, r)
        self._pids = join(pids, r) if pids else ""
        self._unified = join(unified, r) if unified else ""
        self._cpuset = join(str(hierarchy.controller_dir("cpuset")), r) if hierarchy.has("cpuset") else ""
        if self._v2:
            names = ("cpu.stat", "", "memory.current", "memory.stat", "memory.max")
        else:
            names = (
                "cpuacct.usage",
                "cpu.stat",
                "memory.usage_in_bytes",
                "memory.stat",
                "memory.limit_in_bytes",
            )
        self._names = (*names, "cpu.pressure", "memory.pressure", "pids.current")
        self._cgroups: dict[str, _Cgroup] = {}

    # -- paths -------------------------------------------------------------------------------------

    def _files(self, rel: str) -> list[str]:
        """Path of each descriptor slot for `rel` ("" for slots this host does not have)."""
        n = self._names
        cpu_dir, mem_dir = join(self._cpu, rel), join(self._mem, rel)
        psi_dir = join(self._unified, rel) if self._unified and self.psi else ""
        return [
            f"{join(self._anchor, rel)}/{n[_USAGE]}",
            f"{cpu_dir}/{n[_CPUSTAT]}" if n[_CPUSTAT] and self.throttling else "",
            f"{mem_dir}/{n[_MEM]}",
            f"{mem_dir}/{n[_MEMSTAT]}",
            f"{mem_dir}/{n[_LIMIT]}" if self.memory_limit else "",
            f"{psi_dir}/{n[_PSI_CPU]}" if psi_dir else "",
            f"{psi_dir}/{n[_PSI_MEM]}" if psi_dir and self.memory_psi else "",
            f"{join(self._pids, rel)}/{n[_PIDS]}" if self.count_pids and self._pids else "",
        ]

    def files(self, rel: str) -> list[str]:
        """The files one `sample(rel)` reads right now (what a benchmark floor must read too)."""
        cg = self._cgroups.get(rel)
        if cg is None:
            cg = self._cgroups[rel] = self._open(check_rel(rel))
        paths = self._files(rel)
        return [p for p, fd in zip(paths, cg.fds, strict=True) if fd >= 0]

    def dir(self, rel: str, ctrl: str = "") -> str:
        """Directory of `rel` in the hierarchy that holds `ctrl` (default: the one usage comes from)."""
        rel = check_rel(rel)
        if not ctrl:
            return join(self._anchor, rel)
        return join(join(str(self.hierarchy.controller_dir(ctrl)), self.root), rel)

    # -- descriptors -------------------------------------------------------------------------------

    def _open(self, rel: str) -> _Cgroup:
        cg = _Cgroup()
        paths = self._files(rel)
        try:
            cg.fds[_USAGE] = os.open(paths[_USAGE], _O_FLAGS)
        except OSError as e:
            raise from_oserror(e, paths[_USAGE], "open") from None
        try:
            self._open_rest(cg, paths)
        except CgroupError:
            cg.close()
            raise
        return cg

    def _open_rest(self, cg: _Cgroup, paths: list[str]) -> None:
        missing = False
        for slot in range(1, 8):
            path = paths[slot]
            if not path or cg.fds[slot] >= 0:
                continue
            try:
                cg.fds[slot] = os.open(path, _O_FLAGS)
            except OSError as e:
                if e.errno not in _GONE:
                    raise from_oserror(e, path, "open") from None
                missing = True
        cg.missing = missing
        cg.retry_at = time.monotonic() + _RETRY_MISSING_S

    def forget(self, rel: str) -> None:
        """Close the descriptors kept for `rel` (call when the workload is gone)."""
        cg = self._cgroups.pop(rel, None)
        if cg is not None:
            cg.close()

    def close(self) -> None:
        for cg in self._cgroups.values():
            cg.close()
        self._cgroups.clear()

    def __enter__(self) -> CgroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sampling ----------------------------------------------------------------------------------

    def sample(self, rel: str) -> CgroupSample:
        """Read `rel` now. Raises CgroupGone if it no longer exists."""
        cg = self._cgroups.get(rel)
        if cg is None:
            cg = self._cgroups[rel] = self._open(check_rel(rel))
        try:
            return self._read(cg, rel)
        except OSError as e:
            self.forget(rel)
            if e.errno not in _GONE:
                raise from_oserror(e, self.dir(rel), "read") from None
        # The old descriptors are dead; the cgroup may have been removed and made again under the
        # same name. One fresh open tells "gone" from "recreated".
        cg = self._cgroups[rel] = self._open(check_rel(rel))
        try:
            return self._read(cg, rel)
        except OSError as e:
            self.forget(rel)
            raise from_oserror(e, self.dir(rel), "read") from None

    def cpu_usage(self, rel: str) -> tuple[float, int]:
        """(`at`, `cpu_usage_ns`) of `sample(rel)`, reading the usage file only (the fast path polls the
        tiers' CPU between ticks); anything unusual takes the full `sample`, which raises what it raises."""
        cg = self._cgroups.get(rel)
        if cg is not None:
            at = _monotonic()
            try:
                return at, self._parse_cpu(_pread(cg.fds[_USAGE], 512, 0), b"")[0]
            except (OSError, ValueError, IndexError):
                pass
        s = self.sample(rel)
        return s.at, s.cpu_usage_ns

    def cpu_psi_raw(self, rel: str) -> bytes:
        """`sample(rel).cpu_psi_raw`, reading that one file (the fast path polls a few HP cgroups' stall)."""
        cg = self._cgroups.get(rel)
        if cg is not None and cg.fds[_PSI_CPU] >= 0:
            try:
                return _pread(cg.fds[_PSI_CPU], 256, 0)
            except OSError:
                pass  # gone, or made again: `sample` tells which
        return self.sample(rel).cpu_psi_raw

    def _read(self, cg: _Cgroup, rel: str) -> CgroupSample:
        # The hot path: every line here runs once per cgroup per tick, hence the inlined parsing.
        fds = cg.fds
        at = _monotonic()
        if cg.missing and at >= cg.retry_at:
            self._open_rest(cg, self._files(rel))
        raw_usage = _pread(fds[0], 512, 0)
        raw_cpustat = _pread(fds[1], 512, 0) if fds[1] >= 0 else b""
        raw_mem = _pread(fds[2], 64, 0) if fds[2] >= 0 else b""
        raw_limit = _pread(fds[4], 64, 0) if fds[4] >= 0 else b""
        psi_cpu = _pread(fds[5], 256, 0) if fds[5] >= 0 else b""
        psi_mem = _pread(fds[6], 256, 0) if fds[6] >= 0 else b""
        raw_pids = _pread(fds[7], 64, 0) if fds[7] >= 0 else b""
        raw_memstat = b""
        try:
            usage_ns, periods, throttled, throttled_ns = self._parse_cpu(raw_usage, raw_cpustat)
            usage: int | None = None
            ws: int | None = None
            if raw_mem:
                usage = ws = int(raw_mem)
                if fds[3] >= 0:
                    if at >= cg.stat_due or not -_MOVE < usage - cg.stat_usage < _MOVE:
                        raw_memstat = _pread(fds[3], 8192, 0)
                        key = self._inactive_key
                        i = raw_memstat.index(key) + len(key)
                        cg.stat_inactive = int(raw_memstat[i : raw_memstat.index(b"\n", i)])
                        cg.stat_usage, cg.stat_due = usage, at + self.memory_stat_every_s
                    inactive = cg.stat_inactive
                    ws = usage - inactive if usage > inactive else 0
            limit: int | None = None
            if raw_limit and raw_limit[0] != 109:  # 109 is "m" of "max"
                limit = int(raw_limit)
                if limit >= UNLIMITED_THRESHOLD:
                    limit = None
            pids = int(raw_pids) if raw_pids else None
        except (ValueError, IndexError):
            raise self._format_error(rel, raw_usage, raw_cpustat, raw_mem, raw_memstat, raw_limit) from None
        return _new_sample(
            CgroupSample,
            (at, usage_ns, periods, throttled, throttled_ns, usage, ws, limit, pids, psi_cpu, psi_mem),
        )

    def _format_error(self, rel: str, *raws: bytes) -> CgroupError:
        """Run the strict parsers over what the fast path could not read, to name file and line."""
        where = rel or "."
        n = self._names
        usage, cpustat, mem, memstat, limit = raws
        try:
            if self._v2:
                parse_cpu_stat_v2(usage, f"{where}/{n[_USAGE]}")
            else:
                parse_int(usage, f"{where}/{n[_USAGE]}")
                if cpustat:
                    parse_cpu_stat_v1(cpustat, f"{where}/{n[_CPUSTAT]}")
            if mem:
                parse_int(mem, f"{where}/{n[_MEM]}")
            if memstat:
                key = b"inactive_file" if self._v2 else b"total_inactive_file"
                kv_int(memstat, key, f"{where}/{n[_MEMSTAT]}")
            if limit:
                parse_memory_limit(limit, f"{where}/{n[_LIMIT]}")
        except UnknownFormat as e:
            return e
        return UnknownFormat(f"{where}/cpu or memory files", 1, usage, "could not be parsed")

    # -- listing -----------------------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        return os.path.isdir(self.dir(rel))

    def children(self, rel: str = "") -> list[str]:
        """Paths (relative to the root, like `rel`) of the direct child cgroups of `rel`, sorted."""
        rel = check_rel(rel)
        path = join(self._anchor, rel)
        try:
            with os.scandir(path) as it:
                names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError as e:
            raise from_oserror(e, path, "list") from None
        names.sort()
        if not rel:
            return names
        prefix = rel + "/"
        return [prefix + n for n in names]

    def walk(self, rel: str = "", max_depth: int = 8) -> list[str]:
        """`rel` and every cgroup below it (pre-order), skipping ones that vanish while listing."""
        out = [check_rel(rel)]
        if max_depth <= 0:
            return out
        try:
            kids = self.children(rel)
        except CgroupGone:
            return out
        for kid in kids:
            out.extend(self.walk(kid, max_depth - 1))
        return out

    def pids(self, rel: str) -> list[int]:
        path = f"{self.dir(rel)}/cgroup.procs"
        return list(parse_procs(_read_file(path), path))

    # -- knobs -------------------------------------------------------------------------------------

    def read_knobs(self, rel: str) -> Knobs:
        """Read back quota, cpuset, idle, weight and memory limits (e.g. of the BE tier)."""
        rel = check_rel(rel)
        cpu = join(self._cpu, rel)
        mem = join(self._mem, rel)
        if not os.path.isdir(cpu):
            raise CgroupGone(f"cgroup gone: {cpu} does not exist", cpu)
        cpuset_raw = _maybe(f"{join(self._cpuset, rel)}/cpuset.cpus") if self._cpuset else None
        idle_raw = _maybe(f"{cpu}/cpu.idle")
        if self._v2:
            cmax_raw = _maybe(f"{cpu}/cpu.max")
            cmax = parse_cpu_max(cmax_raw, f"{cpu}/cpu.max") if cmax_raw is not None else None
            weight_raw = _maybe(f"{cpu}/cpu.weight")
            shares = None
            weight = parse_int(weight_raw, "cpu.weight") if weight_raw is not None else None
            limit_raw, high_raw = _maybe(f"{mem}/memory.max"), _maybe(f"{mem}/memory.high")
        else:
            q, p = _maybe(f"{cpu}/cpu.cfs_quota_us"), _maybe(f"{cpu}/cpu.cfs_period_us")
            cmax = parse_cfs(q, p) if q is not None and p is not None else None
            shares_raw = _maybe(f"{cpu}/cpu.shares")
            shares = parse_int(shares_raw, "cpu.shares") if shares_raw is not None else None
            weight = None
            limit_raw = _maybe(f"{mem}/memory.limit_in_bytes")
            high_raw = _maybe(f"{mem}/memory.soft_limit_in_bytes")
        return Knobs(
            cpuset=parse_cpuset(cpuset_raw) if cpuset_raw is not None else None,
            quota_us=cmax.quota_us if cmax else None,
            period_us=cmax.period_us if cmax else None,
            cpu_idle=bool(parse_int(idle_raw, "cpu.idle")) if idle_raw is not None else None,
            shares=shares,
            weight=weight,
            memory_limit_bytes=parse_memory_limit(limit_raw, "memory limit") if limit_raw else None,
            memory_high_bytes=parse_memory_limit(high_raw, "memory high") if high_raw else None,
        )


def _read_file(path: str) -> bytes:
    try:
        fd = os.open(path, _O_FLAGS)
    except OSError as e:
        raise from_oserror(e, path, "open") from None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise from_oserror(e, path, "read") from None
    finally:
        os.close(fd)


def _maybe(path: str) -> bytes | None:
    """Content of an optional file, None if it does not exist."""
    try:
        return _read_file(path)
    except CgroupGone:
        return None
