"""Write BE pods' batch limits (qos/batch_limits.py) into their pod and container cgroups.

Through the one cgroup writer: read-compare-write (an unchanged value is not rewritten), confined to the root,
a pod and its containers in one batch so the CFS quota is loosened parent-first and tightened child-first (v1
refuses a child quota above its parent's). On a systemd unit (a pod slice, a runtime's scope) the writer sets
the quota and memory through systemd as well, so systemd keeps them; `cpu.shares` / `cpu.weight` is a file
write there, as the kubelet's own pod shares are.

A pod that leaves (no longer listed as BE, or gone) while its cgroup is still there gets the kubelet's
BestEffort values back (shares 2, no quota, no memory limit): the values were ours, not the pod's.
The executor decides nothing: it carries out plans and remembers what it has put in place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from cgroups.errors import CgroupError, CgroupGone, from_oserror
from cgroups.holdings import Holder
from cgroups.knobs import MEM_HIGH, MEM_LIMIT
from cgroups.parsers import parse_procs
from cgroups.settings import CpuQuota, CpuShares, MemoryLimit, Setting
from cgroups.writer import CgroupWriter
from qos.batch_limits import CFS_PERIOD_US, KUBELET_BE_SHARES, Limits, PodPlan
from qos.tier_memory import TierCap
from qos.yarn_limits import YarnLimits, YarnPlan

log = logging.getLogger("coloc.batch_limits")
BATCH_LIMITS = Holder("batch_limits")  # BE pods' and containers' quota, shares and memory limit
YARN_LIMITS = Holder("yarn_limits")  # YARN containers' and hadoop-yarn's
TIER_CAP = Holder("be_tier_memory_cap")


@dataclass(frozen=True, slots=True)
class Enforced:
    """What is in place for one pod: its limits and its containers' (those whose cgroup exists), and where
    the amounts came from."""

    key: str
    name: str
    source: str
    pod: Limits
    containers: tuple[Limits, ...]


@dataclass(frozen=True, slots=True)
class PassReport:
    """One pass: pods whose limits are in place, cgroups written, pods not done (cgroup not there yet,
    or an error: key -> reason), pods restored to the kubelet's values."""

    enforced: int
    written: int
    pending: dict[str, str]
    restored: tuple[str, ...]


def _settings(limits: Limits) -> list[Setting]:
    return [CpuShares(limits.rel, limits.cpu_shares),
            CpuQuota(limits.rel, limits.cfs_quota_us, CFS_PERIOD_US),
            MemoryLimit(limits.rel, limits.memory_limit_bytes)]


class BatchLimitsExecutor:
    """Applies pod plans; holds what it enforced (read by status, top and /metrics)."""

    def __init__(self, writer: CgroupWriter) -> None:
        self._writer = writer
        self.enforced: dict[str, Enforced] = {}
        self.errors: dict[str, str] = {}  # key -> why its limits are not in place (latest pass)
        self.writes = 0
        self.restores = 0

    def _exists(self, rel: str) -> bool:
        w = self._writer
        return all(os.path.isdir(w.path(ctrl, rel)) for ctrl in ("cpu", "memory"))

    def holds(self, p: PodPlan) -> bool:
        """Whether exactly this plan was put in place already (every container of it included)."""
        e = self.enforced.get(p.key)
        return e is not None and e.pod == p.pod and e.containers == p.containers and e.source == p.source

    def settle(self) -> int:
        """Give back what an earlier run held for BE pods and this run does not (after a whole pass)."""
        return self._writer.settle(BATCH_LIMITS)

    def apply(self, plans: Sequence[PodPlan], *, restore: bool = True) -> PassReport:
        with self._writer.held_by(BATCH_LIMITS):
            return self._apply(plans, restore=restore)

    def _apply(self, plans: Sequence[PodPlan], *, restore: bool = True) -> PassReport:
        """Put every plan's limits in place; with `restore` (a pass over every pod), restore the pods this
        executor held that no plan names."""
        pending: dict[str, str] = {}
        written = 0
        live: set[str] = set()
        for p in plans:
            if p.pod is None:
                if p.error:
                    pending[p.key] = p.error
                continue
            live.add(p.key)
            try:
                n = self._apply_one(p, p.pod)
            except CgroupError as err:
                pending[p.key] = str(err)
                continue
            if n < 0:
                pending[p.key] = f"pod cgroup {p.pod.rel} is not there (yet)"
                continue
            written += n
        restored = tuple(self._restore(k) for k in sorted(set(self.enforced) - live)) if restore else ()
        self.errors = pending if restore else {**self.errors, **pending}
        self.writes += written
        return PassReport(len(self.enforced), written, pending, restored)

    def _apply_one(self, p: PodPlan, pod: Limits) -> int:
        """Writes for one pod (pod and existing containers in one ordered batch); -1: no pod cgroup."""
        if not self._exists(pod.rel):
            return -1
        containers = tuple(c for c in p.containers if self._exists(c.rel))
        batch = _settings(pod) + [s for c in containers for s in _settings(c)]
        try:
            wrote = self._writer.apply(batch)
        except CgroupGone:
            return -1  # the pod (or a container) ended between the check and the write
        prior = self.enforced.get(p.key)
        self.enforced[p.key] = Enforced(p.key, p.name, p.source, pod, containers)
        if any(wrote):
            log.info("batch limits in place", extra={"fields": {
                "pod": p.name, "cgroup": pod.rel, "source": p.source, "cpu_shares": pod.cpu_shares,
                "cfs_quota_us": pod.cfs_quota_us, "memory_limit_bytes": pod.memory_limit_bytes,
                "containers": len(containers), "first": prior is None}})
        return sum(wrote)

    def _restore(self, key: str) -> str:
        """The kubelet's BestEffort values back on a pod we no longer hold (if its cgroup is still there)."""
        held = self.enforced.pop(key)
        rels = [held.pod.rel, *(c.rel for c in held.containers)]
        batch: list[Setting] = []
        for rel in rels:
            if self._exists(rel):
                batch += _settings(Limits(rel, KUBELET_BE_SHARES, None, None))
        try:
            if batch:
                self._writer.apply(batch)
                self.restores += 1
        except CgroupError as err:  # gone meanwhile, or refused: the cgroup is the kubelet's again anyway
            log.info("batch limits not restored", extra={"fields": {"pod": held.name, "error": str(err)}})
        for rel in rels:
            self._writer.forget(rel)
        return key


@dataclass(frozen=True, slots=True)
class YarnReport:
    """One YARN pass: containers whose limits are in place, pids moved into a mirrored memory cgroup (v1),
    mirrors removed, and containers not done (cgroup -> reason)."""

    limited: int
    moved: int
    removed: int
    pending: dict[str, str]


class YarnLimitsExecutor:
    """Puts YARN containers' limits (qos/yarn_limits.py) in place.

    On v1 the NodeManager's LinuxContainerExecutor makes a container's cgroup in the cpu hierarchy; where it
    makes none in the memory hierarchy (its memory handler off, as is usual), the container gets one here
    (yarn-copilot's `--sync-memory-cgroup` mirror): made, its limit set, then the container's processes moved
    in (limit first: a process never runs there unlimited), and new ones each pass. Only mirrors made here are
    removed, once their container is gone and they are empty; the NodeManager's own cgroups are never
    removed. On v2 the container's own cgroup gets `memory.max`."""

    def __init__(self, writer: CgroupWriter, yarn_root: str) -> None:
        self._writer = writer
        self._root = yarn_root
        self.mirrors: set[str] = set()  # memory cgroups this executor made
        self.limited: dict[str, YarnLimits] = {}
        self.root_shares: int | None = None

    def _mirrored(self) -> bool:
        h = self._writer.hierarchy
        return h.is_v1("memory") and h.is_v1("cpu") and h.controller_dir("memory") != h.controller_dir("cpu")

    def _make_mirror(self, rel: str) -> None:
        """The memory-hierarchy cgroup of `rel` (and missing parents), each confined by the writer."""
        parts = rel.split("/")
        for n in range(1, len(parts) + 1):
            sub = "/".join(parts[:n])
            d = self._writer.path("memory", sub)
            if not os.path.isdir(d):
                try:
                    os.mkdir(d)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise from_oserror(e, d, "mkdir") from None
                if n == len(parts):
                    self.mirrors.add(rel)

    def _procs(self, ctrl: str, rel: str) -> set[int]:
        try:
            return set(parse_procs(self._writer.read(ctrl, rel, "cgroup.procs"), rel))
        except CgroupGone:
            return set()

    def _move(self, rel: str) -> int:
        moved = 0
        for pid in sorted(self._procs("cpu", rel) - self._procs("memory", rel)):
            path = self._writer.path("memory", rel, "cgroup.procs")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, str(pid).encode())
                finally:
                    os.close(fd)
                moved += 1
            except ProcessLookupError:
                continue  # it ended meanwhile
            except OSError as e:
                raise from_oserror(e, path, f"write pid {pid} to") from None
        return moved

    def _one(self, lim: YarnLimits, mirrored: bool) -> int:
        if not os.path.isdir(self._writer.path("cpu", lim.rel)):
            raise CgroupGone(f"YARN container cgroup {lim.rel} is not there (yet)", lim.rel)
        if mirrored:
            self._make_mirror(lim.rel)
        self._writer.set_memory_limit(lim.rel, lim.memory_limit_bytes)
        if lim.cfs_quota_us is not None:
            self._writer.set_cpu_quota(lim.rel, lim.cfs_quota_us, CFS_PERIOD_US)
        self.limited[lim.rel] = lim
        return self._move(lim.rel) if mirrored else 0

    def settle(self) -> int:
        """Give back what an earlier run held for YARN and this run does not (after a pass over them all)."""
        return self._writer.settle(YARN_LIMITS)

    def apply(self, plan: YarnPlan) -> YarnReport:
        with self._writer.held_by(YARN_LIMITS):
            return self._apply(plan)

    def _apply(self, plan: YarnPlan) -> YarnReport:
        mirrored = self._mirrored()
        pending: dict[str, str] = {}
        moved = 0
        for lim in plan.containers:
            try:
                moved += self._one(lim, mirrored)
            except CgroupError as err:
                pending[lim.rel] = str(err)
        live = {c.rel for c in plan.containers}
        for rel in set(self.limited) - live:
            del self.limited[rel]
        removed = self._remove_mirrors(live)
        if plan.root_shares is not None:
            try:
                self._writer.set_cpu_shares(self._root, plan.root_shares)
                self.root_shares = plan.root_shares
            except CgroupError as err:
                pending[self._root] = str(err)
        return YarnReport(len(self.limited), moved, removed, pending)

    def _remove_mirrors(self, live: set[str]) -> int:
        removed = 0
        for rel in sorted(self.mirrors - live):
            if self._procs("memory", rel):
                continue  # processes left: removed at a later pass
            try:
                os.rmdir(self._writer.path("memory", rel))
            except FileNotFoundError:
                pass
            except OSError:
                continue
            self.mirrors.discard(rel)
            self._writer.forget(rel)
            removed += 1
        return removed


class TierMemoryExecutor:
    """Puts the BE tier's memory cap (qos/tier_memory.py) in place: `memory.high` (v1: the soft limit) and
    `memory.max` / `memory.limit_in_bytes`, through the writer (on a systemd slice, as MemoryHigh / MemoryMax
    through systemd). `off` lifts only a cap this executor set: a limit someone else put on the tier (the
    kubelet's QoS memory reservation) is not ours to remove. A limit the kernel refuses (v1 answers EBUSY when
    the tier's usage is above it and cannot be reclaimed) is reported and tried again next pass."""

    def __init__(self, writer: CgroupWriter, tier: str) -> None:
        self._writer = writer
        self.tier = tier
        self.cap: TierCap | None = None  # what this executor has in place (None: nothing of ours)
        self.error = ""

    def settle(self) -> int:
        """Give back a cap an earlier run left that this run does not hold."""
        return self._writer.settle(TIER_CAP)

    def apply(self, cap: TierCap | None) -> bool:
        """True when something was written. None holds what is in place, an earlier run's cap too."""
        if cap is None:
            for knob in (MEM_LIMIT, MEM_HIGH):
                self._writer.journal.claim((knob.name, self.tier), TIER_CAP.name)
            return False
        if cap == TierCap(None, None) and self.cap is None:
            return False
        with self._writer.held_by(TIER_CAP):
            return self._apply(cap)

    def _apply(self, cap: TierCap) -> bool:
        try:
            # tighten: high first (reclaim starts), then max; loosen: max first. Either order is valid for
            # the kernel; this one never has high above max.
            wrote = False
            if cap.max_bytes is None or (self.cap is not None and self.cap.max_bytes is not None
                                         and cap.max_bytes >= self.cap.max_bytes):
                wrote |= self._writer.set_memory_limit(self.tier, cap.max_bytes)
                wrote |= self._writer.set_memory_high(self.tier, cap.high_bytes)
            else:
                wrote |= self._writer.set_memory_high(self.tier, cap.high_bytes)
                wrote |= self._writer.set_memory_limit(self.tier, cap.max_bytes)
        except CgroupError as err:
            self.error = str(err)
            log.warning("BE tier memory cap not in place", extra={"fields": {
                "cgroup": self.tier, "high": cap.high_bytes, "max": cap.max_bytes, "error": self.error}})
            return False
        self.error = ""
        self.cap = None if cap == TierCap(None, None) else cap
        return wrote
