"""Optionally cordon the Kubernetes Node while it is decommissioning, and uncordon it on recommission.

Only a cordon the agent set is ever lifted: a Node an operator cordoned by hand stays cordoned. A failed
patch is logged and retried on the next tick, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
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


class DrainCordon:
    """A tick hook: cordon on DECOMMISSIONING/DECOMMISSIONED, uncordon when back to SCHEDULABLE."""

    def __init__(self, ledger: Ledger, api_client: client.ApiClient, node_name: str,
                 timeout_s: float = 5.0) -> None:
        from kubernetes import client  # lazy: docs/dependencies.md
        self._ledger = ledger
        self._api = client.CoreV1Api(api_client)
        self._node = node_name
        self._timeout = timeout_s
        self._cordoned: bool | None = None  # what we last set; None: nothing yet
        self._busy = False

    def wanted(self) -> bool | None:
        state = self._ledger.node.lifecycle
        if state in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED):
            return True
        if state is Lifecycle.SCHEDULABLE and self._cordoned:
            return False
        return None

    def on_tick(self, _snap: NodeSnapshot, _outputs: NodeOutputs, _records: list[ActionRecord]) -> None:
        want = self.wanted()
        if want is None or want == self._cordoned or self._busy:
            return
        self._busy = True
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self.patch, want))
        task.add_done_callback(lambda _t: setattr(self, "_busy", False))

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
