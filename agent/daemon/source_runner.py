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
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from agent.published import Published
from agent.sources.kubelet import KubeletSource
from agent.sources.nodeslo_map import settings_sources
from agent.sources.standalone import StandaloneScanner
from agent.sources.yarn import NodeManagerSource
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from qos.batch import yarn_requested
from qos.model import Source, Workload

if TYPE_CHECKING:  # Kubernetes-only modules, imported by the runtime when the API server is used
    from agent.reporting.node_annotations import NodeReporter
    from agent.reporting.nodemetric import NodeMetricReporter
    from agent.sources.nodeslo import NodeSloSource

log = logging.getLogger("coloc.sources")


def pod_cgroup_lister(reader: CgroupReader, layout: Layout) -> Callable[[], set[str]]:
    """Lists the pod cgroups of every QoS tier (guaranteed pods sit directly under the root)."""
    tiers = ("", layout.tier("burstable"), layout.tier("besteffort"))

    def pods() -> set[str]:
        found: set[str] = set()
        for tier in tiers:
            with contextlib.suppress(CgroupError):
                found.update(rel for rel in reader.children(tier) if layout.identify(rel).kind == "pod")
        return found

    return pods


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
        self.third_party_annotation: str | None = None  # other allocators' batch holdings (and ours)
        self.nodemetric: NodeMetricReporter | None = None  # Koordinator's NodeMetric, written from our ticks
        self.nodeslo: NodeSloSource | None = None  # Koordinator's NodeSLO, read into the policy settings
        self.pod_cgroups: Callable[[], set[str]] | None = None  # pod cgroups on disk now (see `list`)
        self._pods_on_disk: set[str] = set()

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
        self._resync_on_new_pods(out)
        return out, stale

    def _resync_on_new_pods(self, listed: Sequence[Workload]) -> None:
        """A pod cgroup that appeared since the last tick and that the kubelet's list does not name is a pod
        started since that list: ask for the list again now instead of at the next `resync_s`. Only new
        directories count, so a pod the kubelet's answer keeps leaving out cannot make it re-list forever."""
        if self.kubelet is None or self.pod_cgroups is None:
            return
        try:
            on_disk = self.pod_cgroups()
        except (CgroupError, OSError):
            return
        appeared, self._pods_on_disk = on_disk - self._pods_on_disk, on_disk
        if appeared - {w.cgroup for w in listed if w.source is Source.K8S}:
            self.kubelet.request_resync()

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
        """Read the batch origin and the third-party allocations; report YARN's allocations once the
        NodeManager has answered (reporting before that would tell the cluster YARN holds nothing). False: try
        again soon."""
        assert self.reporter is not None
        read = await self.reporter.aread()
        if read is not None:
            self.origin_annotation = read.origin
            self.third_party_annotation = read.third_party
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
