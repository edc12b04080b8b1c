"""Where the loop's workloads come from: the standalone cgroup scan, the kubelet, the YARN NodeManager.

Each source keeps its own last good answer and says when it is stale; this module only merges them for a
tick and runs their refresh tasks. When the kubelet is on, the standalone scan is off: the kubelet's pod
list is the truth about pods, and a scan would count them twice. What the agent reads from and writes to
the API server's Node-level objects (annotations, NodeMetric, NodeSLO) is `node_reports.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence

from agent.sources.kubelet import KubeletSource
from agent.sources.standalone import StandaloneScanner
from agent.sources.yarn import NodeManagerSource
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.reader import CgroupReader
from qos.model import Source, Workload

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
    """The workload sources of a tick. `pod_cgroups`: the pod cgroups on disk now, with the kubelet (see
    `list`)."""

    def __init__(self, scanner: StandaloneScanner | None, kubelet: KubeletSource | None,
                 yarn: NodeManagerSource | None, *,
                 pod_cgroups: Callable[[], set[str]] | None = None) -> None:
        self.scanner = scanner
        self.kubelet = kubelet
        self.yarn = yarn
        self._pod_cgroups = pod_cgroups
        self._pods_on_disk: set[str] = set()

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
        if self.kubelet is None or self._pod_cgroups is None:
            return
        try:
            on_disk = self._pod_cgroups()
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
            tasks.append(asyncio.create_task(every(stop, self.yarn.refresh, self.yarn.cfg.resync_s)))
        await run_until(stop, tasks, "source")


async def run_until(stop: asyncio.Event, tasks: list[asyncio.Task[None]], what: str) -> None:
    """Wait for `stop`, then cancel `tasks`; one that ended with an error is logged, naming it."""
    if not tasks:
        return
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
            except Exception:
                log.warning("%s task %s ended with an error", what, t.get_name(), exc_info=True)


async def every(stop: asyncio.Event, fn: Callable[[], Awaitable[object]], period_s: float) -> None:
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
