"""Tell the Kubernetes pods on a decommissioning node: one Warning Event per BE pod and per drain deadline.

The watch stream already carries the drain notice to schedulers; the Event is what a pod's owner sees with
`kubectl describe pod`, their cue to move the work before the absolute deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from agent.published import ActionRecord
from agent.state import Ledger, Lifecycle
from qos.model import NodeSnapshot, Source, Workload
from qos.registry import NodeOutputs

log = logging.getLogger("coloc.drain")

EVENT_REASON = "NodeDecommissioning"


class PodNoticer(Protocol):
    def notice_pod(self, w: Workload, event_reason: str, message: str) -> None: ...


def drain_message(deadline: float | None) -> str:
    if deadline is None:
        return "the node is decommissioning; running work may finish, no deadline"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
    return f"the node is decommissioning; pods still running at {when} will be evicted"


class DrainPodEvents:
    """A tick hook: posts the Events off the event loop (the Kubernetes client blocks)."""

    def __init__(self, ledger: Ledger, noticer: PodNoticer) -> None:
        self._ledger = ledger
        self._noticer = noticer
        self._told: dict[str, float | None] = {}  # pod key -> deadline it was told about
        self._tasks: set[asyncio.Task[None]] = set()

    def on_tick(self, snap: NodeSnapshot, _outputs: NodeOutputs, _records: list[ActionRecord]) -> None:
        node = self._ledger.node
        if node.lifecycle is not Lifecycle.DECOMMISSIONING:
            self._told.clear()
            return
        deadline = node.drain.deadline
        todo = [w for w in snap.workloads
                if w.be and w.source is Source.K8S and not w.terminating
                and (w.key not in self._told or self._told[w.key] != deadline)]
        if not todo:
            return
        for w in todo:
            self._told[w.key] = deadline
        message = drain_message(deadline)
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._post, todo, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _post(self, pods: list[Workload], message: str) -> None:
        for w in pods:
            self._noticer.notice_pod(w, EVENT_REASON, message)
        log.info("drain notice posted to %d pods", len(pods))
