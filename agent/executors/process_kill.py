"""Evict a local workload by killing every process in its cgroup: SIGTERM, then SIGKILL after a grace period.

Done is confirmed by an empty `cgroup.procs`, not by our own bookkeeping. psutil guards against signalling
a recycled PID (it checks the process's create time before every signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass

import psutil

from agent.executors.apply import EvictOutcome
from cgroups.errors import CgroupError, CgroupGone
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import Evict
from qos.model import Workload


@dataclass(frozen=True, slots=True)
class KillOutcome:
    cgroup: str
    ok: bool
    escalated: bool  # SIGKILL was needed
    seconds: float
    detail: str


def _subtree(reader: CgroupReader, rel: str) -> list[str]:
    """`rel` and every cgroup below it, deepest first (a pod's containers sit below the pod)."""
    return list(reversed(reader.walk(rel)))


def _pids(reader: CgroupReader, rel: str) -> list[int]:
    out: list[int] = []
    for sub in _subtree(reader, rel):
        with contextlib.suppress(CgroupGone):  # a child may go while we look
            out.extend(reader.pids(sub))
    return out


def _procs(reader: CgroupReader, rel: str) -> list[psutil.Process]:
    out = []
    for pid in _pids(reader, rel):
        try:
            p = psutil.Process(pid)
            p.create_time()  # pins identity so a recycled PID is never signalled
            out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


async def kill_cgroup(
    reader: CgroupReader,
    writer: CgroupWriter,
    rel: str,
    grace_period_s: float,
    poll_s: float = 0.05,
    confirm_timeout_s: float = 10.0,
) -> KillOutcome:
    """Kill everything in `rel` and below it; done when no `cgroup.procs` in the subtree lists a pid."""
    started = time.monotonic()
    try:
        if not reader.exists(rel):
            return KillOutcome(rel, True, False, 0.0, "cgroup gone")
        procs = _procs(reader, rel)
        for sub in _subtree(reader, rel):
            with contextlib.suppress(CgroupGone):  # not every cgroup has a freezer directory (YARN's do not)
                writer.thaw(sub)  # a frozen v1 task acts on signals only once thawed
        _signal_all(procs, signal.SIGTERM)
        deadline = started + grace_period_s
        while _pids(reader, rel) and time.monotonic() < deadline:
            await asyncio.sleep(poll_s)
        escalated = False
        if _pids(reader, rel):
            escalated = True
            for sub in _subtree(reader, rel):
                with contextlib.suppress(CgroupGone):
                    writer.kill_all(sub, signal.SIGKILL)
            _signal_all(_procs(reader, rel), signal.SIGKILL)
        confirm_by = time.monotonic() + confirm_timeout_s
        while left := len(_pids(reader, rel)):
            if time.monotonic() > confirm_by:
                return KillOutcome(rel, False, escalated, time.monotonic() - started,
                                   f"{left} processes still in the cgroup after SIGKILL")
            await asyncio.sleep(poll_s)
        return KillOutcome(rel, True, escalated, time.monotonic() - started, "cgroup empty")
    except CgroupGone:
        return KillOutcome(rel, True, False, time.monotonic() - started, "cgroup gone")


class LocalEvictor:
    """Evicts local (standalone) workloads and YARN-style containers that no NodeManager owns."""

    def __init__(self, reader: CgroupReader, writer: CgroupWriter, grace_period_s: float,
                 remove_cgroup: bool = True) -> None:
        self._reader = reader
        self._writer = writer
        self._grace = grace_period_s
        self._remove = remove_cgroup

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        out = await kill_cgroup(self._reader, self._writer, workload.cgroup, self._grace)
        if out.ok and self._remove:
            # An empty cgroup left behind is harmless; the next scan reports it idle.
            with contextlib.suppress(CgroupError):
                self._writer.rmdir(workload.cgroup, recursive=True)
        how = "SIGKILL after grace period" if out.escalated else "SIGTERM"
        return EvictOutcome(out.ok, f"{out.detail} ({how}, {out.seconds:.2f}s)")
