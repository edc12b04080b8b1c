"""The one place that writes cgroup files.

Every write is confined to the configured root (no absolute path, no `..`, no symlink out), is a
read-compare-write (nothing is written when the file already holds the value), and is counted.
Batches go in a safe order: each setting is first loosened parent-first to the loosest of its current
and wanted value, then set to the wanted value child-first. That is what v1's hierarchical rules
need (a child's cpuset must stay inside its parent's, a child's CFS quota below its parent's).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cgroups.discovery import Hierarchy
from cgroups.errors import CgroupError, CgroupGone, InvalidValue, from_oserror
from cgroups.holding_writer import PRUNE_AT, HoldingWriter
from cgroups.holdings import Holder, Holding, Journal
from cgroups.io import NO_LIMIT, IoLimit
from cgroups.knobs import (
    BURST,
    CPUSET,
    FREEZE,
    IDLE,
    IO_MAX,
    MEM_HIGH,
    MEM_LIMIT,
    MEM_LOW,
    MEM_MIN,
    QUOTA,
    SHARES,
    Knob,
    io_max,
)
from cgroups.parsers import CpuMax, parse_procs
from cgroups.paths import check_rel, depth, ensure_inside, join
from cgroups.settings import (
    CpuIdle,
    CpuQuota,
    Cpuset,
    CpuShares,
    MemoryHigh,
    MemoryLimit,
    Setting,
    shares_to_weight,
)

if TYPE_CHECKING:
    from cgroups.systemd import SystemdUnits

log = logging.getLogger("coloc.cgroups")
V = TypeVar("V")
BESTEFFORT_SHARES = 2  # the kubelet's cpu.shares for the BestEffort tier and its pods
DEFAULT_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "freezer", "pids", "blkio", "io")
_W_FLAGS = os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC  # never O_CREAT: only existing files are written


@dataclass(frozen=True, slots=True)
class WriterStats:
    writes: int
    skipped: int
    reasserted: int  # writes that restored a value something else had changed
    errors: int
    last_write_latency_s: float | None
    systemd_sets: int = 0  # knobs set through systemd (SetUnitProperties) as well as in the file
    systemd_errors: int = 0  # systemd refused or was unreachable: the file alone was written


@dataclass(frozen=True, slots=True)
class Override:
    """A knob this writer had set, found holding another value when it set it again (another writer's)."""

    knob: str
    cgroup: str
    found: str
    wanted: str
    writer: str  # systemd | unknown
    at: float  # time.monotonic() of the re-assert


def _io_device(knob: Knob[Any]) -> str | None:
    """The disk (`MAJ:MIN`) of an `io_max@` knob; None for any other knob."""
    return knob.name.removeprefix(IO_MAX) if knob.name.startswith(IO_MAX) else None


def _show(value: object) -> str:
    if isinstance(value, frozenset):
        return ",".join(map(str, sorted(value)))
    if isinstance(value, CpuMax):
        return f"{'max' if value.quota_us is None else value.quota_us} {value.period_us}"
    return "max" if value is None else str(value)


# -- the writer ---------------------------------------------------------------------------------------


class CgroupWriter(HoldingWriter):
    """Writes knobs of cgroups named relative to `root` (a path inside every hierarchy).

    `controllers` are the v1 hierarchies mkdir/rmdir/move_pid act on (plus the unified mount,
    always, so PSI exists for what we create). Not thread-safe: one writer per executor thread.
    """

    def __init__(
        self, hierarchy: Hierarchy, root: str, *, controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        units: SystemdUnits | None = None, journal: Journal | None = None, prune_at: int = PRUNE_AT,
    ) -> None:
        self.hierarchy = hierarchy
        # What the holders hold (cgroups/holdings.py); in memory only when no state file is kept.
        self.journal = journal if journal is not None else Journal(None, "")
        self._holder: Holder | None = None
        self._prune_at = prune_at  # holdings beyond which those of cgroups gone are dropped (amortised)
        self._refused: set[tuple[str, str]] = set()  # give-backs the kernel refused (said once each)
        self.units = units  # set: knobs of a systemd unit go through systemd too (cgroups/systemd.py)
        self.root = check_rel(root, "cgroup root")
        self.controllers = tuple(c for c in controllers if c in hierarchy.v1)
        self._bases: dict[str, str] = {}
        self._real: dict[str, str] = {}
        self._cache: dict[tuple[str, str], Any] = {}
        self._weights: dict[str, int] = {}  # raw cpu.shares/cpu.weight a cgroup had before we made it idle
        self._writes = self._skipped = self._reasserted = self._errors = 0
        self._latency: float | None = None
        self._systemd_sets = self._systemd_errors = 0
        self._unheld: set[tuple[str, str]] = set()  # (knob, rel) in the file alone, for systemd to hold
        self.overrides: deque[Override] = deque(maxlen=64)
        self.override_counts: Counter[tuple[str, str]] = Counter()  # (knob, writer) -> re-asserts

    # -- paths -------------------------------------------------------------------------------------

    def _base(self, ctrl: str) -> str:
        base = self._bases.get(ctrl)
        if base is None:
            mount = self.hierarchy.unified if ctrl == "unified" else self.hierarchy.controller_dir(ctrl)
            if mount is None:
                raise CgroupError("no cgroup2 mount on this host")
            base = self._bases[ctrl] = join(str(mount), self.root)
            self._real[base] = os.path.realpath(base)
        return base

    def path(self, ctrl: str, rel: str, name: str = "") -> str:
        """Checked path of `rel` (or of its file `name`) in the hierarchy holding `ctrl`."""
        base = self._base(ctrl)
        d = join(base, check_rel(rel))
        p = f"{d}/{name}" if name else d
        ensure_inside(p, self._real[base])
        return p

    def _dirs(self, rel: str) -> list[str]:
        """`rel` in every managed hierarchy (each mount once), unified last."""
        seen: dict[str, None] = {}
        for ctrl in self.controllers:
            seen[self.path(ctrl, rel)] = None
        if self.hierarchy.unified is not None:
            seen[self.path("unified", rel)] = None
        return list(seen)

    # -- raw I/O -----------------------------------------------------------------------------------

    def read(self, ctrl: str, rel: str, name: str) -> bytes:
        path = self.path(ctrl, rel, name)
        try:
            with open(path, "rb", buffering=0) as f:
                return f.read()
        except OSError as e:
            if e.errno == errno.ENOENT and os.path.isdir(os.path.dirname(path)):
                raise CgroupError(
                    f"{path} does not exist: this kernel or cgroup lacks the {ctrl} knob {name}", path
                ) from None
            raise from_oserror(e, path, "read") from None

    def write(self, ctrl: str, rel: str, name: str, value: str) -> None:
        """Write `value` to a file unconditionally (one write(2) call)."""
        path = self.path(ctrl, rel, name)
        started = time.perf_counter()
        try:
            fd = os.open(path, _W_FLAGS)
            try:
                os.write(fd, value.encode())
            finally:
                os.close(fd)
        except OSError as e:
            self._errors += 1
            if e.errno == errno.EACCES and name.startswith("cpuset."):
                # v1 cpuset answers EACCES (not EINVAL) to a set that is not inside the parent's.
                raise InvalidValue(
                    f"invalid value: write {value!r} to {path}: not within the parent's {name} (EACCES)",
                    path,
                ) from None
            raise from_oserror(e, path, f"write {value!r} to") from None
        self._writes += 1
        self._latency = time.perf_counter() - started

    @property
    def stats(self) -> WriterStats:
        return WriterStats(self._writes, self._skipped, self._reasserted, self._errors, self._latency,
                           self._systemd_sets, self._systemd_errors)

    # -- read-compare-write ------------------------------------------------------------------------

    def _set(self, knob: Knob[V], rel: str, wanted: V) -> bool:
        rel = check_rel(rel)
        key = (knob.name, rel)
        try:
            current = knob.read(self, rel)
        except CgroupError:
            if not self._by_systemd(knob, rel):
                raise
            # systemd enables a controller on a unit's path only when a unit asks for it: setting the
            # property makes the file appear (and holds the value); then it is read like any other. Before
            # that the cgroup had its parent's CPUs: what a give-back restores.
            if knob is CPUSET and rel:
                cpuset: Knob[Any] = knob
                self._hold(cpuset, rel, cpuset.read(self, rel.rpartition("/")[0]), wanted)
            elif _io_device(knob) is not None:  # no io controller there yet: nothing capped the cgroup's IO
                io: Knob[Any] = knob
                self._hold(io, rel, NO_LIMIT, wanted)
            self._through_systemd(knob, rel, wanted)
            current = knob.read(self, rel)
            if knob.equal(current, wanted):
                self._cache[key] = wanted
                return True
        if knob.equal(current, wanted):
            self._skipped += 1
            self._cache[key] = wanted
            if self._holder is not None:
                self._claim(knob, rel, self._holder)
            if key in self._unheld:  # right in the file, but systemd did not take it when it was written
                self._through_systemd(knob, rel, wanted)
            return False
        if key in self._cache and knob.equal(self._cache[key], wanted):
            self._reasserted += 1
            self._note_override(knob, rel, current, wanted)
        given_back = self._hold(knob, rel, current, wanted)
        self._through_systemd(knob, rel, wanted)
        knob.write(self, rel, current, wanted)
        self._cache[key] = wanted
        if given_back:
            self.journal.drop([key])
        return True

    def _note_override(self, knob: Knob[V], rel: str, current: V, wanted: V) -> None:
        writer = self._writer_of(knob, rel)
        event = Override(knob.name, rel, _show(current), _show(wanted), writer, time.monotonic())
        self.overrides.append(event)
        self.override_counts[(knob.name, writer)] += 1
        log.warning("a knob we hold was changed by another writer; re-asserted",
                    extra={"fields": {"knob": knob.name, "cgroup": rel, "found": event.found,
                                      "wanted": event.wanted, "writer": writer}})

    def _systemd_holds(self, knob: Knob[Any]) -> bool:
        """Whether systemd has a property for `knob` here (cpuset and a disk's caps only on v2).

        The weight too: a set-property of any property of a unit makes systemd write all of them again,
        its CPUWeight (default 100) included, so a weight written to the file alone is undone by the next
        quota or memory set through systemd (seen in the v2 guest: a BE pod slice back at 100)."""
        if knob is CPUSET:
            return not self.hierarchy.is_v1("cpuset")
        if _io_device(knob) is not None:
            # On v1 systemd has only the deprecated BlockIO* properties, and carries the IO*Max bandwidths
            # into blkio.throttle but never the IOPS: there the files alone hold the caps.
            return not self.hierarchy.is_v1("blkio")
        return knob in (QUOTA, MEM_LIMIT, MEM_HIGH, MEM_MIN, MEM_LOW, SHARES)

    def _by_systemd(self, knob: Knob[Any], rel: str) -> bool:
        """Whether `rel` is a systemd unit and systemd has a property for `knob` there."""
        return self.units is not None and self._systemd_holds(knob) and self.units.owns(rel)

    def _through_systemd(self, knob: Knob[V], rel: str, wanted: V) -> None:
        """Set the knob as a runtime property of the unit too, so systemd keeps it (daemon-reload, a
        set-property, a child unit starting would otherwise put systemd's value back); the file is then
        written as well, as the kubelet's systemd driver does, so the value is in place at once."""
        key = (knob.name, rel)
        retry = key in self._unheld
        self._unheld.discard(key)
        if self.units is None or not self._systemd_holds(knob):
            return
        if not self.units.owns(rel):
            if not self.units.knows(rel):
                self._unheld.add(key)  # systemd did not answer: handed over at a later set
            return
        from cgroups.systemd import (
            SystemdError,
            SystemdUnreachable,
            cpu_mask,
            io_properties,
            memory_property,
            quota_properties,
        )

        props: list[tuple[str, tuple[str, Any]]]
        if knob is CPUSET:
            assert isinstance(wanted, frozenset)
            props = [("AllowedCPUs", ("ay", cpu_mask(wanted)))]
        elif knob is QUOTA:
            assert isinstance(wanted, CpuMax)
            props = quota_properties(wanted.quota_us, wanted.period_us)
        elif knob is SHARES:
            assert isinstance(wanted, int)
            props = [("CPUShares" if self.hierarchy.is_v1("cpu") else "CPUWeight", ("t", wanted))]
        elif (dev := _io_device(knob)) is not None:
            assert isinstance(wanted, IoLimit)
            props = io_properties(dev, wanted)
        else:
            names: dict[Knob[Any], str] = {MEM_LIMIT: "MemoryMax", MEM_MIN: "MemoryMin", MEM_LOW: "MemoryLow"}
            prop = names.get(knob, "MemoryHigh")
            props = memory_property(prop, wanted)  # type: ignore[arg-type]
        try:
            self.units.set_properties(rel, props)
            self._systemd_sets += 1
        except SystemdError as err:
            self._systemd_errors += 1
            if isinstance(err, SystemdUnreachable):
                self._unheld.add(key)
                if retry:
                    return  # said once already
            log.warning("systemd did not take a unit property; the file alone is written",
                        extra={"fields": {"knob": knob.name, "cgroup": rel, "error": str(err)}})

    def set_cpu_quota(self, rel: str, quota_us: int | None, period_us: int = 100_000) -> bool:
        s = CpuQuota(rel, quota_us, period_us)
        return self._set(QUOTA, s.rel, CpuMax(s.quota_us, s.period_us))

    def set_cpu_shares(self, rel: str, shares: int) -> bool:
        s = CpuShares(rel, shares)
        return self._set(SHARES, s.rel, self._shares_value(s.shares))

    def set_cpuset(self, rel: str, cpus: Iterable[int], *, descendants: bool = False) -> bool:
        """Set cpuset.cpus; with `descendants` on v1, every cgroup below too (v1 refuses to shrink a
        parent below a child's set, so the BE tier's children must follow it). v2 bounds a child by its
        parent's effective set, so there the cgroups below (pod slices, a runtime's delegated container
        scopes, whose cpusets belong to the runtime) are never written."""
        wanted = tuple(sorted(set(cpus)))
        if not descendants or not self.hierarchy.is_v1("cpuset"):
            s = Cpuset(rel, wanted)
            return self._set(CPUSET, s.rel, frozenset(s.cpus))
        rels = self._subtree("cpuset", check_rel(rel))
        return any(self.apply([Cpuset(r, wanted) for r in rels]))

    def set_cpu_idle(self, rel: str, idle: bool, *, keep_weight: bool = False) -> bool:
        """Set cpu.idle. While idle the kernel reports a fixed weight (shares 3) and refuses another;
        leaving idle resets the weight to the default (shares 1024), so set shares again after.

        With `keep_weight`, the weight read just before entering idle is set again on leaving it, or the
        kubelet's weight of BestEffort cgroups (shares 2) when this writer did not see it enter idle."""
        if not keep_weight:
            return self._set(IDLE, rel, bool(idle))
        rel = check_rel(rel)
        if idle:
            if not IDLE.read(self, rel):
                self._weights[rel] = before = SHARES.read(self, rel)
                if self._holder is not None and (SHARES.name, rel) not in self.journal.held:
                    # the weight to give back after idle (which the kernel resets): any value is the kernel's
                    self.journal.hold(Holding(SHARES.name, rel, self._holder.name, before, None))
            elif self._holder is not None:  # idle already (an earlier run's): its weight is this run's too
                self.journal.claim((SHARES.name, rel), self._holder.name)
            return self._set(IDLE, rel, True)
        weight = self._weights.pop(rel, None)
        kept = self.journal.held.get((SHARES.name, rel))
        if weight is None and kept is not None:  # entered idle in an earlier run: the weight it journaled
            weight = kept.give_back
        if not self._set(IDLE, rel, False):
            return False
        self._cache.pop((SHARES.name, rel), None)  # the kernel's reset of the weight is not another writer's
        self._set(SHARES, rel, weight if weight is not None else self._shares_value(BESTEFFORT_SHARES))
        return True

    def set_memory_limit(self, rel: str, limit_bytes: int | None) -> bool:
        s = MemoryLimit(rel, limit_bytes)
        return self._set(MEM_LIMIT, s.rel, s.bytes)

    def set_memory_high(self, rel: str, high_bytes: int | None) -> bool:
        s = MemoryHigh(rel, high_bytes)
        return self._set(MEM_HIGH, s.rel, s.bytes)

    def set_memory_protection(self, rel: str, min_bytes: int, low_bytes: int) -> bool:
        """v2 `memory.min` and `memory.low` (MemoryMin / MemoryLow through systemd on a unit)."""
        if min_bytes < 0 or low_bytes < 0:
            raise InvalidValue(f"memory protection must be >= 0, got min {min_bytes}, low {low_bytes}")
        wrote = self._set(MEM_MIN, rel, min_bytes)
        return self._set(MEM_LOW, rel, low_bytes) or wrote

    def set_cpu_burst(self, rel: str, burst_us: int) -> bool:
        """`cpu.cfs_burst_us` (v1) / `cpu.max.burst` (v2); a file write (systemd has no property for it)."""
        if burst_us < 0:
            raise InvalidValue(f"cpu burst must be >= 0 µs, got {burst_us}")
        return self._set(BURST, rel, burst_us)

    def set_io_limit(self, rel: str, dev: str, limit: IoLimit) -> bool:
        """Caps on one disk (`MAJ:MIN`): v2 `io.max`, and a unit's IO*Max too; v1 `blkio.throttle.*` alone."""
        return self._set(io_max(dev), rel, limit)

    def has_file(self, ctrl: str, rel: str, name: str) -> bool:
        """Whether the kernel offers this knob file on `rel` (a feature probe, confined like every path)."""
        return os.path.exists(self.path(ctrl, rel, name))

    def freeze(self, rel: str) -> bool:
        return self._set(FREEZE, rel, "FROZEN")

    def thaw(self, rel: str) -> bool:
        return self._set(FREEZE, rel, "THAWED")

    def freezer_state(self, rel: str) -> str:
        """THAWED, FREEZING or FROZEN (v2 reports only THAWED/FROZEN)."""
        return FREEZE.read(self, check_rel(rel))

    def _shares_value(self, shares: int) -> int:
        return shares if self.hierarchy.is_v1("cpu") else shares_to_weight(shares)

    # -- batches -----------------------------------------------------------------------------------

    def _knob(self, s: Setting) -> tuple[Knob[Any], Any]:
        match s:
            case CpuQuota():
                return QUOTA, CpuMax(s.quota_us, s.period_us)
            case CpuShares():
                return SHARES, self._shares_value(s.shares)
            case Cpuset():
                return CPUSET, frozenset(s.cpus)
            case CpuIdle():
                return IDLE, bool(s.idle)
            case MemoryLimit():
                return MEM_LIMIT, s.bytes
            case MemoryHigh():
                return MEM_HIGH, s.bytes
        raise TypeError(f"not a cgroup setting: {s!r}")

    def apply(self, batch: Iterable[Setting]) -> list[bool]:
        """Apply settings in a safe order; returns, per setting, whether anything was written.

        Every path is checked before the first write. Phase 1 loosens parent-first (each hierarchical
        knob to the loosest of current and wanted), phase 2 sets the wanted values child-first. On an
        error it stops and raises; what was written by then is never tighter than the target.
        """
        items = list(batch)
        for s in items:
            check_rel(s.rel)
            self.path(self._knob(s)[0].ctrl, s.rel)
        plan = [(i, s, *self._knob(s)) for i, s in enumerate(items)]
        wrote = [False] * len(items)
        for i, s, knob, wanted in sorted(plan, key=lambda p: depth(p[1].rel)):
            current = knob.read(self, s.rel)
            loose = knob.loosest(current, wanted)
            if loose is not None and not knob.equal(loose, current) and self._set(knob, s.rel, loose):
                wrote[i] = True
        for i, s, knob, wanted in sorted(plan, key=lambda p: -depth(p[1].rel)):
            if self._set(knob, s.rel, wanted):
                wrote[i] = True
        return wrote

    def children(self, rel: str, ctrl: str = "cpu") -> list[str]:
        """Paths (relative to the root) of the direct child cgroups of `rel` in the hierarchy of `ctrl`."""
        rel = check_rel(rel)
        path = self.path(ctrl, rel)
        try:
            with os.scandir(path) as it:
                names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except OSError as e:
            raise from_oserror(e, path, "list") from None
        return [join(rel, n) if rel else n for n in names]

    def forget(self, rel: str) -> None:
        """Drop what this writer remembers of `rel` and below (a cgroup that is gone)."""
        rel = check_rel(rel)
        prefix = rel + "/"
        for key in [k for k in self._cache if k[1] == rel or k[1].startswith(prefix) or not rel]:
            del self._cache[key]
        self._unheld = {k for k in self._unheld if not (k[1] == rel or k[1].startswith(prefix) or not rel)}
        for r in [r for r in self._weights if r == rel or r.startswith(prefix) or not rel]:
            del self._weights[r]
        if self.units is not None:
            self.units.forget(rel)

    def _subtree(self, ctrl: str, rel: str) -> list[str]:
        out = [rel]
        try:
            with os.scandir(self.path(ctrl, rel)) as it:
                kids = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except OSError as e:
            raise from_oserror(e, self.path(ctrl, rel), "list") from None
        for kid in kids:
            out.extend(self._subtree(ctrl, join(rel, kid) if rel else kid))
        return out

    # -- tasks -------------------------------------------------------------------------------------

    def move_pid(self, rel: str, pid: int) -> bool:
        """Move one process into `rel` in every managed hierarchy where `rel` exists (one pid per write)."""
        if not isinstance(pid, int) or pid <= 0:
            raise InvalidValue(f"pid must be a positive integer, got {pid!r}")
        moved = False
        for d in self._dirs(rel):
            if not os.path.isdir(d):
                continue
            path = f"{d}/cgroup.procs"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, str(pid).encode())
                finally:
                    os.close(fd)
            except ProcessLookupError:
                raise CgroupError(f"no process {pid} to move into {path}", path) from None
            except OSError as e:
                self._errors += 1
                raise from_oserror(e, path, f"write pid {pid} to") from None
            self._writes += 1
            moved = True
        if not moved:
            raise CgroupGone(f"cgroup gone: {rel!r} exists in no hierarchy under {self.root!r}", rel)
        return True

    def members(self, rel: str) -> set[int]:
        """Pids in `rel` in any managed hierarchy (v1 hierarchies can disagree)."""
        pids: set[int] = set()
        for d in self._dirs(rel):
            path = f"{d}/cgroup.procs"
            try:
                with open(path, "rb", buffering=0) as f:
                    pids.update(parse_procs(f.read(), path))
            except FileNotFoundError:
                continue
            except OSError as e:
                raise from_oserror(e, path, "read") from None
        return pids

    def kill_all(self, rel: str, sig: int = signal.SIGKILL) -> int:
        """Signal every process in `rel`; returns how many were signalled (-1: v2 cgroup.kill).

        v2 SIGKILL uses cgroup.kill (atomic, works while frozen). Otherwise each member gets the
        signal through a pidfd opened before a second membership check, so a recycled pid outside
        the cgroup is never hit. A frozen cgroup is thawed afterwards: a frozen v1 task acts on a
        signal only once thawed.
        """
        rel = check_rel(rel)
        if self.hierarchy.mode == "v2" and sig == signal.SIGKILL:
            kill = self.path("unified", rel, "cgroup.kill")
            if os.path.exists(kill):
                self.write("unified", rel, "cgroup.kill", "1")
                # A cgroup left frozen would freeze whatever starts in it next (a restarted container's
                # scope in the same pod slice); found by the v2 guest.
                if self.freezer_state(rel) != "THAWED":
                    self.thaw(rel)
                return -1
        signalled: set[int] = set()
        for _ in range(3):  # later rounds catch children forked while we were signalling
            fresh = self.members(rel) - signalled
            if not fresh:
                break
            fds: dict[int, int] = {}
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError):
                    fds[pid] = os.pidfd_open(pid)
            still = self.members(rel)
            for pid, fd in fds.items():
                try:
                    if pid in still:
                        signal.pidfd_send_signal(fd, sig)
                        signalled.add(pid)
                except ProcessLookupError:
                    pass
                finally:
                    os.close(fd)
        if (self.hierarchy.has("freezer") or self.hierarchy.mode == "v2") and os.path.isdir(
            self.path("freezer", rel)
        ):
            self.thaw(rel)
        return len(signalled)

    # -- directories -------------------------------------------------------------------------------

    def mkdir(self, rel: str, controllers: Sequence[str] | None = None) -> bool:
        """Create `rel` (and missing parents below the root) in each hierarchy, plus the unified one.

        In v1 cpuset a new cgroup starts with no cpus or mems; they are copied from the parent so
        that tasks can join. On v2 the wanted controllers are enabled in the parent first.
        """
        rel = check_rel(rel)
        wanted = self.controllers
        if controllers is not None:
            wanted = tuple(c for c in controllers if c in self.controllers)
        bases: dict[str, str] = {}
        for ctrl in wanted:
            bases.setdefault(self._base(ctrl), ctrl)
        if self.hierarchy.unified is not None:
            bases.setdefault(self._base("unified"), "unified")
        created = False
        parts = rel.split("/") if rel else []
        for ctrl in bases.values():
            for n in range(len(parts) + 1):
                sub = "/".join(parts[:n])
                d = self.path(ctrl, sub)
                if os.path.isdir(d):
                    continue
                if n > 0 and self.hierarchy.mode == "v2":
                    self._enable_subtree("/".join(parts[: n - 1]), controllers)
                try:
                    os.mkdir(d)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise from_oserror(e, d, "mkdir") from None
                created = True
                if ctrl == "cpuset" and self.hierarchy.is_v1("cpuset"):
                    self._copy_cpuset(d)
        return created

    def _copy_cpuset(self, d: str) -> None:
        parent = os.path.dirname(d)
        for name in ("cpuset.cpus", "cpuset.mems"):
            with open(f"{d}/{name}", "rb", buffering=0) as f:
                if f.read().strip():
                    continue
            with open(f"{parent}/{name}", "rb", buffering=0) as f:
                value = f.read().strip()
            try:
                fd = os.open(f"{d}/{name}", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, value)
                finally:
                    os.close(fd)
            except OSError as e:
                raise from_oserror(e, f"{d}/{name}", "write") from None

    def _enable_subtree(self, parent_rel: str, controllers: Sequence[str] | None) -> None:
        wanted = set(controllers if controllers is not None else DEFAULT_CONTROLLERS) & {
            "cpu",
            "cpuset",
            "memory",
            "pids",
            "io",
        }
        d = self.path("unified", parent_rel)
        try:
            with open(f"{d}/cgroup.controllers", "rb", buffering=0) as f:
                available = set(f.read().decode().split())
            with open(f"{d}/cgroup.subtree_control", "rb", buffering=0) as f:
                enabled = set(f.read().decode().split())
        except FileNotFoundError:
            return  # a tree laid out by hand (tests) has no such files
        for ctrl in sorted((wanted & available) - enabled):
            self.write("unified", parent_rel, "cgroup.subtree_control", f"+{ctrl}")

    def rmdir(self, rel: str, *, recursive: bool = False) -> bool:
        """Remove `rel` from every hierarchy (bottom-up with `recursive`). Missing is fine.

        Raises CgroupBusy while processes remain. Removing the root itself needs rel "".
        """
        rel = check_rel(rel)
        removed = False
        for d in self._dirs(rel):
            if not os.path.isdir(d):
                continue
            order = [d]
            if recursive:
                below = [os.path.join(top, n) for top, dirs, _ in os.walk(d) for n in dirs]
                order = sorted(below, key=lambda p: -p.count("/")) + order
            for p in order:
                try:
                    os.rmdir(p)
                    removed = True
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise from_oserror(e, p, "rmdir") from None
        self.forget(rel)
        self.journal.drop_below(rel)
        return removed
