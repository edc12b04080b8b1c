"""The agent and the API server's Node-level objects: the Node's batch annotations (read: the batch origin
and other allocators' holdings; written: YARN's allocations), Koordinator's NodeMetric (written from each
tick's publication) and NodeSLO (read into the policy settings). Each is optional; all run as tasks."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from agent.daemon.source_runner import every, run_until
from agent.published import Published
from agent.sources.yarn import NodeManagerSource
from qos.batch import yarn_requested

if TYPE_CHECKING:  # Kubernetes-only modules, imported by the runtime when the API server is used
    from agent.reporting.node_annotations import NodeReporter
    from agent.reporting.nodemetric import NodeMetricReporter
    from agent.sources.nodeslo import NodeSloSource


class NodeReports:
    """`annotations`: reads the Node's batch annotations every `annotations_resync_s` and reports YARN's
    allocations (from `yarn`) there; `nodemetric`: fed each publication; `nodeslo`: puts the settings it reads
    in force (`agent/sources/settings.py`)."""

    def __init__(self, annotations: NodeReporter | None = None, annotations_resync_s: float = 300.0, *,
                 yarn: NodeManagerSource | None = None, nodemetric: NodeMetricReporter | None = None,
                 nodeslo: NodeSloSource | None = None) -> None:
        self._annotations = annotations
        self._resync_s = annotations_resync_s
        self._yarn = yarn
        self._nodemetric = nodemetric
        self.nodeslo = nodeslo
        self.origin_annotation: str | None = None
        self.third_party_annotation: str | None = None  # other allocators' batch holdings (and ours)
        self._withdrawn = False  # without the YARN source: our own entry taken out (or there was none)

    def usage_report_age(self) -> float | None:
        """Seconds since our last NodeMetric write; None when none was written (or it is off)."""
        return self._nodemetric.age_s() if self._nodemetric is not None else None

    def observe(self, pub: Published) -> None:
        """Each publication: a sample for the NodeMetric."""
        if self._nodemetric is not None:
            self._nodemetric.observe(pub)

    async def run(self, stop: asyncio.Event) -> None:
        """Read and write until `stop`; each on its own cadence."""
        tasks = []
        if self._annotations is not None:
            tasks.append(asyncio.create_task(every(stop, self._report, self._resync_s)))
        for extra in (self._nodemetric, self.nodeslo):
            if extra is not None:
                tasks.append(asyncio.create_task(extra.run(stop)))
        await run_until(stop, tasks, "node report")

    async def _report(self) -> bool:
        """Read the batch origin and the third-party allocations; report YARN's allocations once the
        NodeManager has answered (reporting before that would tell the cluster YARN holds nothing). False: try
        again soon."""
        assert self._annotations is not None
        read = await self._annotations.aread()
        if read is not None:
            self.origin_annotation = read.origin
            self.third_party_annotation = read.third_party
        if self._yarn is None:
            if not self._withdrawn and read is not None:  # our entry, left by a run that reported YARN
                self._withdrawn = await self._annotations.awithdraw()
            return read is not None
        res = self._yarn.workloads()
        if not math.isfinite(res.age_s) or res.stale_reason:
            return False
        await self._annotations.areport(yarn_requested(res.workloads))
        return read is not None
