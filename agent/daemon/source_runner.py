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

from agent.published import Published
from agent.reporting.node_annotations import NodeReporter
from agent.reporting.nodemetric import NodeMetricReporter
from agent.sources.kubelet import KubeletSource
from agent.sources.nodeslo import NodeSloSource, settings_sources
from agent.sources.standalone import StandaloneScanner
from agent.sources.yarn import NodeManagerSource
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
        self.nodemetric: NodeMetricReporter | None = None  # Koordinator's NodeMetric, written from our ticks
        self.nodeslo: NodeSloSource | None = None  # Koordinator's NodeSLO, read into the policy settings

    def usage_report_age(self) -> float | None:
        """Seconds since our last NodeMetric write; None when none was written (or it is off)."""
        return self.nodemetric.age_s() if self.nodemetric is not None else None

    def settings_sources(self) -> dict[str, str]:
        """Where each NodeSLO-mapped policy setting comes from now."""
        return dict(self.nodeslo.sources) if self.nodeslo is not None else settings_sources(None)

    def observe(self, pub: Published) -> None:
        """Each publication: a sample for the NodeMetric."""
        if self.nodemetric is not None:
            self.nodemetric.observe(pub)

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
        for extra in (self.nodemetric, self.nodeslo):
            if extra is not None:
                tasks.append(asyncio.create_task(extra.run(stop)))
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

    async def _report(self) -> bool:
        """Read the batch origin; report YARN's allocations once the NodeManager has answered (reporting
        before that would tell the cluster YARN holds nothing). False: try again soon."""
        assert self.reporter is not None
        read = await self.reporter.aread()
        if read is not None:
            self.origin_annotation = read.origin
        if self.yarn is None:
            return read is not None
        res = self.yarn.workloads()
        if not math.isfinite(res.age_s) or res.stale_reason:
            return False
        await self.reporter.areport(yarn_requested(res.workloads))
        return read is not None

    @staticmethod
    async def _every(stop: asyncio.Event, fn: Callable[[], Awaitable[object]], period_s: float) -> None:
        """Call `fn` every `period_s`; sooner (1 s) after a call that returned False (not done yet)."""
        while not stop.is_set():
            done: object = False
            try:
                done = await fn()
            except Exception:
                log.exception("source refresh failed")
            wait = period_s if done is not False else min(period_s, 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
