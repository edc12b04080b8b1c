"""YARN's allocations reported in the Node annotation `node.koordinator.sh/thirdPartyAllocations`, and the
batch origin read from `node.koordinator.sh/originExtendedAllocatable`.

The Node is patched with a JSON merge patch (only the one annotation) when the value changed or
`resync_s` passed since the last successful patch, never more. Blocking client calls run in a thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.sources.kubeapi import ApiBodyError, read_capped, read_capped_json
from qos.batch import ORIGIN_ANNOTATION, THIRD_PARTY_ANNOTATION, third_party_allocations_json
from qos.model import Resources

log = logging.getLogger("coloc.reporting")

MERGE_PATCH = "application/merge-patch+json"


class ReportOutcome(enum.Enum):
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    OFF = "off"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class NodeAnnotations:
    """What was read from the Node: the raw annotation values (None where absent)."""

    origin: str | None
    third_party: str | None


def _raw(resp: object) -> urllib3.BaseHTTPResponse:
    """With `_preload_content=False` the client returns the urllib3 response, whatever its annotation says."""
    if not isinstance(resp, urllib3.BaseHTTPResponse):
        raise TypeError(f"expected the raw urllib3 response, got {type(resp).__name__}")
    return resp


def _annotations(node: Mapping[str, object], where: str) -> dict[str, str]:
    """`metadata.annotations` of a Node document (string values only; others are not ours to read)."""
    meta = node.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ApiBodyError("garbage", f"{where}: metadata is not an object")
    ann = meta.get("annotations") or {}
    if not isinstance(ann, Mapping):
        raise ApiBodyError("garbage", f"{where}: metadata.annotations is not an object")
    return {k: v for k, v in ann.items() if isinstance(k, str) and isinstance(v, str)}


class NodeReporter:
    """Patches the Node's `thirdPartyAllocations`; reads the batch origin annotations."""

    def __init__(self, cfg: ReportingConfig, api_client: client.ApiClient, node_name: str, *,
                 timeout_s: float = 5.0, max_body_bytes: int = KubeApiConfig.max_body_bytes,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not node_name:
            raise ValueError("node name is empty: cannot report to the Node object")
        self.cfg = cfg
        self._api = client.CoreV1Api(api_client)
        self._node = node_name
        self._timeout = timeout_s
        self._max_body = max_body_bytes
        self._clock = clock
        self._last_value: str | None = None
        self._last_at = -float("inf")

    @property
    def last_reported(self) -> str | None:
        return self._last_value

    def due(self, value: str) -> bool:
        return value != self._last_value or self._clock() - self._last_at >= self.cfg.resync_s

    def report(self, yarn_allocated: Resources) -> ReportOutcome:
        """Blocking; never raises for API or network errors (the next call retries)."""
        if self.cfg.mode == "off":
            return ReportOutcome.OFF
        value = third_party_allocations_json(
            yarn_allocated, self.cfg.allocation_name, self.cfg.priority_class)
        if not self.due(value):
            return ReportOutcome.UNCHANGED
        body = {"metadata": {"annotations": {THIRD_PARTY_ANNOTATION: value}}}
        try:  # the answer is the whole Node: not deserialized, only read (capped) to free the connection
            resp = self._api.patch_node(self._node, body, _content_type=MERGE_PATCH,
                                        _request_timeout=self._timeout, _preload_content=False)
            read_capped(_raw(resp), self._max_body, f"PATCH node {self._node}")
        except ApiBodyError as err:
            log.warning("node %s patched, answer dropped: %s", self._node, err)
        except ApiException as err:
            log.warning("could not patch node %s annotation %s: HTTP %s %s",
                        self._node, THIRD_PARTY_ANNOTATION, err.status, err.reason)
            return ReportOutcome.FAILED
        except (HTTPError, OSError) as err:
            log.warning("could not patch node %s: API server unreachable: %s", self._node, err)
            return ReportOutcome.FAILED
        if value != self._last_value:
            log.info("node %s: %s = %s", self._node, THIRD_PARTY_ANNOTATION, value)
        self._last_value = value
        self._last_at = self._clock()
        return ReportOutcome.PATCHED

    def read(self) -> NodeAnnotations | None:
        """Blocking GET of the Node, read up to `max_body_bytes`; None (logged) when the API server does not
        answer, or answers a body over the cap or not a Node."""
        where = f"GET node {self._node}"
        try:
            resp = self._api.read_node(self._node, _request_timeout=self._timeout, _preload_content=False)
            node = read_capped_json(_raw(resp), self._max_body, where)
            ann = _annotations(node, where)
        except ApiBodyError as err:
            log.warning("could not read node %s: %s", self._node, err)
            return None
        except ApiException as err:
            log.warning("could not read node %s: HTTP %s %s", self._node, err.status, err.reason)
            return None
        except (HTTPError, OSError) as err:
            log.warning("could not read node %s: API server unreachable: %s", self._node, err)
            return None
        return NodeAnnotations(ann.get(ORIGIN_ANNOTATION), ann.get(THIRD_PARTY_ANNOTATION))

    async def areport(self, yarn_allocated: Resources) -> ReportOutcome:
        return await asyncio.to_thread(self.report, yarn_allocated)

    async def aread(self) -> NodeAnnotations | None:
        return await asyncio.to_thread(self.read)
