"""Kill YARN containers on the node (what Koordinator's yarn-copilot left unimplemented).

One container: SIGTERM to every process in its cgroup, SIGKILL after the grace period, done when the
cgroup is empty in every hierarchy. SIGTERM goes through psutil (a process's identity is pinned by its
create time, so a recycled PID is never signalled); SIGKILL through the writer's pidfd-based `kill_all`.
Which containers to kill is the policies' choice (`qos/`); this module only carries it out.
Only paths built from a strictly parsed container id under `<besteffort>/<yarn hierarchy>/` are touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass

import psutil

from agent.executors.apply import EvictOutcome
from cgroups.errors import CgroupError, CgroupGone
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter
from qos.actions import Evict
from qos.ids import parse_container_id
from qos.model import Source, Workload

log = logging.getLogger("coloc.executors.yarn")


@dataclass(frozen=True, slots=True)
class YarnKillResult:
    container_id: str
    ok: bool
    escalated: bool  # SIGKILL was needed
    seconds: float
    detail: str
    found: bool = True  # False: refused id, or no cgroup (pending launch / already gone)


class YarnKiller:
    """Kills YARN containers through their cgroups; also the `Evictor` the action executor calls for YARN."""

    def __init__(self, layout: Layout, reader: CgroupReader, writer: CgroupWriter, grace_period_s: float, *,
                 poll_s: float = 0.05, confirm_timeout_s: float = 10.0) -> None:
        self._layout = layout
        self._reader = reader
        self._writer = writer
        self._grace = grace_period_s
        self._poll = poll_s
        self._confirm = confirm_timeout_s

    def container_cgroup(self, container_id: str) -> str:
        """The cgroup of a container, relative to the agent's root; ValueError for anything not a strict
        container id (so `../`, `/` or a NUL never reach a path)."""
        cid = parse_container_id(container_id)
        root = self._layout.yarn_root()
        rel = self._layout.yarn_container(cid.text)
        if rel != f"{root}/{cid.text}":
            raise ValueError(f"container {cid.text}: cgroup {rel!r} is not directly under {root!r}")
        return rel

    def _members(self, rel: str) -> set[int]:
        return self._writer.members(rel)

    def _processes(self, rel: str) -> list[psutil.Process]:
        out = []
        for pid in sorted(self._members(rel)):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                out.append(psutil.Process(pid))  # pins create_time: a recycled PID is never signalled
        return out

    async def _wait_empty(self, rel: str, until: float) -> bool:
        while self._members(rel):
            if time.monotonic() >= until:
                return False
            await asyncio.sleep(self._poll)
        return True

    async def kill_container(self, container_id: str) -> YarnKillResult:
        started = time.monotonic()
        try:
            rel = self.container_cgroup(container_id)
        except ValueError as err:
            log.warning("yarn kill refused: %s", err)
            return YarnKillResult(str(container_id)[:96], False, False, 0.0, f"refused: {err}", found=False)
        cid = rel.rsplit("/", 1)[-1]
        if not self._reader.exists(rel):
            return YarnKillResult(cid, False, False, 0.0, "no cgroup (pending launch or already gone)",
                                  found=False)
        procs: list[psutil.Process] = []
        escalated = False
        try:
            with contextlib.suppress(CgroupError):
                if self._writer.hierarchy.has("freezer") and os.path.isdir(self._writer.path("freezer", rel)):
                    self._writer.thaw(rel)  # a frozen task acts on SIGTERM only once thawed
            procs = self._processes(rel)
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    p.send_signal(signal.SIGTERM)
            if not await self._wait_empty(rel, started + self._grace):
                escalated = True
                self._writer.kill_all(rel, signal.SIGKILL)
            if not await self._wait_empty(rel, time.monotonic() + self._confirm):
                left = len(self._members(rel))
                return YarnKillResult(cid, False, escalated, time.monotonic() - started,
                                      f"{left} processes still in the cgroup after SIGKILL")
        except CgroupGone:
            pass  # the NodeManager removed the cgroup meanwhile: nothing left to kill
        except CgroupError as err:
            return YarnKillResult(cid, False, False, time.monotonic() - started, f"cgroup error: {err}")
        took = time.monotonic() - started
        how = "SIGKILL after the grace period" if escalated else "SIGTERM"
        log.info("yarn container %s killed (%s, %d processes, %.2fs)", cid, how, len(procs), took)
        return YarnKillResult(cid, True, escalated, took, f"cgroup empty ({how}, {took:.2f}s)")

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        """The `Evictor` protocol: kill this container; a container with no cgroup yet cannot be killed
        on the node, so the next victim may be taken instead."""
        if workload.source is not Source.YARN:
            return EvictOutcome(False, f"{workload.key}: not a YARN container", try_next=True)
        r = await self.kill_container(workload.key.removeprefix("yarn/"))
        return EvictOutcome(r.ok, r.detail, try_next=not r.found)
