"""Optionally cordon the Kubernetes Node while it is decommissioning, and uncordon it on recommission.

Only a cordon the agent set is ever lifted: a Node an operator cordoned by hand stays cordoned. A failed
patch is logged and retried on the next tick, never fatal. The cordon carries the annotation
`coloc.io/cordoned-by-agent`, and that is its record: a run that knows of no cordon of its own reads the
Node once when the node is schedulable, and lifts a cordon that carries it (the run before was killed
between the recommission and its uncordon, or cordoning was turned off in the config meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client
from urllib3.exceptions import HTTPError

from agent.published import ActionRecord
from agent.state import Ledger, Lifecycle
from qos.model import NodeSnapshot
from qos.registry import NodeOutputs

log = logging.getLogger("coloc.cordon")
MERGE_PATCH = "application/merge-patch+json"
CORDON_ANNOTATION = "coloc.io/cordoned-by-agent"
LOOK_RETRY_S = 30.0


class DrainCordon:
    """A tick hook: cordon on DECOMMISSIONING/DECOMMISSIONED, uncordon when back to SCHEDULABLE."""

    def __init__(self, ledger: Ledger, api_client: client.ApiClient, node_name: str,
                 timeout_s: float = 5.0, *, cordon: bool = True) -> None:
        from kubernetes import client  # lazy: docs/dependencies.md
        self._ledger = ledger
        self._api = client.CoreV1Api(api_client)
        self._node = node_name
        self._timeout = timeout_s
        self._cordon = cordon  # `drain.cordon`: off, only a cordon an earlier run left is lifted
        self._cordoned: bool | None = None  # what we last set, or found of ours; None: nothing yet
        self._looked = False  # whether the Node was read for a cordon an earlier run left
        self._look_after = 0.0  # monotonic: a failed read is tried again from then on
        self._busy = False

    def wanted(self) -> bool | None:
        state = self._ledger.node.lifecycle
        if self._cordon and state in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED):
            return True
        if state is Lifecycle.SCHEDULABLE and self._cordoned:
            return False
        return None

    def on_tick(self, _snap: NodeSnapshot, _outputs: NodeOutputs, _records: list[ActionRecord]) -> None:
        if self._busy:
            return
        want = self.wanted()
        if want is None and self._cordoned is None and not self._looked and \
                self._ledger.node.lifecycle is Lifecycle.SCHEDULABLE and time.monotonic() >= self._look_after:
            self._start(self.look)
        elif want is not None and want != self._cordoned:
            self._start(lambda: self.patch(want))

    def _start(self, blocking: Callable[[], object]) -> None:
        self._busy = True
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(blocking))
        task.add_done_callback(lambda _t: setattr(self, "_busy", False))

    def look(self) -> None:
        """Blocking: read the Node once; a cordon carrying our annotation is ours to lift. A failed read is
        tried again at the next tick."""
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:
            node = self._api.read_node(self._node, _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as err:
            self._look_after = time.monotonic() + LOOK_RETRY_S
            log.warning("could not read node %s for a cordon an earlier run left (again in %.0f s): %s",
                        self._node, LOOK_RETRY_S, err)
            return
        self._looked = True
        annotations = (node.metadata.annotations if node.metadata is not None else None) or {}
        if node.spec is not None and node.spec.unschedulable and annotations.get(CORDON_ANNOTATION) == "true":
            log.info("node %s: a cordon an earlier run set is still there; lifted (the node is schedulable)",
                     self._node)
            self._cordoned = True

    def patch(self, unschedulable: bool) -> bool:
        """Blocking; True when the API server took the patch."""
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        mark = "true" if unschedulable else None  # null removes the annotation on uncordon
        body = {"spec": {"unschedulable": unschedulable},
                "metadata": {"annotations": {CORDON_ANNOTATION: mark}}}
        try:
            self._api.patch_node(self._node, body, _content_type=MERGE_PATCH,
                                 _request_timeout=self._timeout)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("could not %s node %s: %s", "cordon" if unschedulable else "uncordon",
                        self._node, err)
            return False
        self._cordoned = unschedulable
        log.info("node %s %s", self._node, "cordoned for decommission" if unschedulable else "uncordoned")
        return True
