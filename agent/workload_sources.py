"""Where the loop's workloads come from: the standalone cgroup scan, the kubelet, the YARN NodeManager.

Each source keeps its own last good answer and says when it is stale; this module only merges them for a
tick and runs their refresh tasks. When the kubelet is on, the standalone scan is off: the kubelet's pod
list is the truth about pods, and a scan would count them twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

from agent.reporting.node_annotations import NodeReporter
from agent.sources.kubelet import KubeletSource
from agent.sources.yarn import NodeManagerSource
from agent.standalone import StandaloneScanner
from cgroups.errors import CgroupError
from qos.batch import yarn_requested
from qos.model import Workload

log = logging.getLogger("coloc.sources")


class WorkloadSources:
    def __init__(self, scanner: StandaloneScanner | None, kubelet: KubeletSource | None,
                 yarn: NodeManagerSource | None, reporter: NodeReporter | None = None,
                 reporter_resync_s: float = 300.0) -> None:
        self.scanner = scanner
        self.kubelet = kubelet
        self.yarn = yarn
        self.reporter = reporter
        self._reporter_resync_s = reporter_resync_s
        self.origin_annotation: str | None = None
        self._last_yarn: list[Workload] = []

    def list(self) -> tuple[list[Workload], dict[str, str]]:
        """This tick's workloads and, per source, why its data cannot be trusted (if it cannot)."""
        out: list[Workload] = []
        stale: dict[str, str] = {}
        if self.scanner is not None:
            try:
                out.extend(self.scanner.scan())
            except CgroupError as err:
                stale["standalone"] = f"cannot list cgroups: {err}"
        for name, src in (("kubelet", self.kubelet), ("yarn", self.yarn)):
            if src is None:
                continue
            res = src.workloads()
            out.extend(res.workloads)
            if res.stale_reason:
                stale[name] = res.stale_reason
            if name == "yarn":
                self._last_yarn = list(res.workloads)
        return out, stale

    def synced(self) -> bool:
        """Every configured remote source has answered at least once."""
        return all(math.isfinite(s.workloads().age_s) for s in (self.kubelet, self.yarn) if s is not None)

    def ages(self) -> dict[str, float]:
        ages = {}
        for name, src in (("kubelet", self.kubelet), ("yarn", self.yarn)):
            if src is not None:
                ages[name] = src.workloads().age_s
        if self.scanner is not None:
            ages["standalone"] = 0.0
        return ages

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh the remote sources until `stop`; each on its own cadence."""
        tasks = []
        if self.kubelet is not None:
            tasks.append(asyncio.create_task(self.kubelet.run(stop)))
        if self.yarn is not None:
            tasks.append(asyncio.create_task(self._every(stop, self.yarn.refresh, self.yarn.cfg.resync_s)))
        if self.reporter is not None:
            tasks.append(asyncio.create_task(self._every(stop, self._report, self._reporter_resync_s)))
        if not tasks:
            return
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _report(self) -> None:
        assert self.reporter is not None
        read = await self.reporter.aread()
        if read is not None:
            self.origin_annotation = read.origin
        await self.reporter.areport(yarn_requested(self._last_yarn))

    @staticmethod
    async def _every(stop: asyncio.Event, fn: Callable[[], Awaitable[object]], period_s: float) -> None:
        while not stop.is_set():
            try:
                await fn()
            except Exception:
                log.exception("source refresh failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period_s)
