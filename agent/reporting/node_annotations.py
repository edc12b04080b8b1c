"""YARN's allocations reported in the Node annotation `node.koordinator.sh/thirdPartyAllocations`, and the
batch origin read from `node.koordinator.sh/originExtendedAllocatable`.

The annotation is shared: koord-manager sums every `koord-batch` entry, and koord-yarn-operator rewrites
the whole value with its own `hadoop-yarn` entry. So each report is a read-modify-write that touches only
our entry (`allocation_name`): GET the Node, replace or append our entry, keep every other entry as it
was, and send a JSON merge patch carrying the `resourceVersion` read; on 409 (someone wrote in between)
read again and retry. Every report re-asserts the entry (the operator may have dropped it from its stale
cache); the Node is written only when our entry differs or `resync_s` passed since the last write.
With `yarn: unless-operator`, our entry is removed and nothing more is written while an operator entry is
there. Blocking client calls run in a thread.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client
from urllib3.exceptions import HTTPError

from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.sources.kubeapi import ApiBodyError, raw_response, read_capped, read_capped_json
from qos.koord_annotations import (
    ORIGIN_ANNOTATION,
    THIRD_PARTY_ANNOTATION,
    BatchAnnotationError,
    allocation_entries,
    third_party_allocations_json,
)
from qos.model import Resources

log = logging.getLogger("coloc.reporting")

MERGE_PATCH = "application/merge-patch+json"


class ReportOutcome(enum.Enum):
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    OFF = "off"
    FAILED = "failed"
    DEFERRED = "deferred"  # a yarn-operator reports YARN on this node (mode unless-operator)


class _Conflict(Exception):
    """The Node changed between our read and our write (HTTP 409)."""


@dataclass(frozen=True, slots=True)
class NodeAnnotations:
    """What was read from the Node: the raw annotation values (None where absent)."""

    origin: str | None
    third_party: str | None


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
        from kubernetes import client  # lazy: docs/dependencies.md
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

    def due(self, value: str) -> bool:
        return value != self._last_value or self._clock() - self._last_at >= self.cfg.resync_s

    def _entry(self, yarn: Resources) -> dict[str, object]:
        """Our entry, as upstream's `SetThirdPartyAllocation` writes one."""
        one = json.loads(third_party_allocations_json(yarn, self.cfg.allocation_name,
                                                      self.cfg.priority_class))
        return dict(one["allocations"][0])

    def merged(self, current: str | None, yarn: Resources | None) -> tuple[str | None, bool]:
        """The annotation value with our entry set (`yarn` None: taken out; None: remove the annotation) and
        whether a yarn-operator entry is there. The value is read as koord-manager reads it
        (`qos.koord_annotations`: `{}` and `{"allocations":null}` are no entries). Raises BatchAnnotationError
        for a value koord-manager cannot read either: we do not overwrite it (it would erase other
        allocators' entries)."""
        entries = allocation_entries(current) if current is not None else []
        names = [name for name, _ in entries]
        operator = self.cfg.operator_entry in names
        mine = self.cfg.allocation_name
        if yarn is None or (operator and self.cfg.yarn == "unless-operator"):
            kept = [e for name, e in entries if name != mine]
        elif mine in names:  # ours in its place; a second one (koord-manager would sum both) dropped
            first = names.index(mine)
            kept = [self._entry(yarn) if i == first else e
                    for i, (name, e) in enumerate(entries) if name != mine or i == first]
        else:
            kept = [*(e for _, e in entries), self._entry(yarn)]
        if not kept:
            return None, operator
        return json.dumps({"allocations": kept}, separators=(",", ":")), operator

    def report(self, yarn_allocated: Resources | None) -> ReportOutcome:
        """Blocking; never raises for API or network errors (the next call retries)."""
        if self.cfg.mode == "off":
            return ReportOutcome.OFF
        for _ in range(self.cfg.max_conflict_retries):
            try:
                return self._report_once(yarn_allocated)
            except _Conflict:
                log.info("node %s changed while %s was written: reading it again", self._node,
                         THIRD_PARTY_ANNOTATION)
        log.warning("node %s: %s not written: %d conflicts in a row", self._node, THIRD_PARTY_ANNOTATION,
                    self.cfg.max_conflict_retries)
        return ReportOutcome.FAILED

    def withdraw(self) -> ReportOutcome:
        """Blocking: take our entry out (the YARN source is off: an entry an earlier run left is stale);
        UNCHANGED when there is none. Never raises for API or network errors (the next call retries)."""
        return self.report(None)

    def _report_once(self, yarn: Resources | None) -> ReportOutcome:
        got = self._get()
        if got is None:
            return ReportOutcome.FAILED
        ann, version = got
        current = ann.get(THIRD_PARTY_ANNOTATION)
        try:
            value, operator = self.merged(current, yarn)
        except BatchAnnotationError as err:
            log.warning("node %s: not writing %s: the value there cannot be read, and rewriting it would "
                        "drop the other allocators' entries: %s", self._node, THIRD_PARTY_ANNOTATION, err)
            return ReportOutcome.FAILED
        if yarn is None:
            if value == current:
                return ReportOutcome.UNCHANGED
            body = {"metadata": {"resourceVersion": version, "annotations": {THIRD_PARTY_ANNOTATION: value}}}
            if not self._patch(body):
                return ReportOutcome.FAILED
            log.info("node %s: the YARN source is off: our entry %s, left by an earlier run, withdrawn "
                     "from %s", self._node, self.cfg.allocation_name, THIRD_PARTY_ANNOTATION)
            return ReportOutcome.PATCHED
        deferred = operator and self.cfg.yarn == "unless-operator"
        if value == current and (deferred or not self.due(value or "")):
            return ReportOutcome.DEFERRED if deferred else ReportOutcome.UNCHANGED
        body = {"metadata": {"resourceVersion": version, "annotations": {THIRD_PARTY_ANNOTATION: value}}}
        if not self._patch(body):
            return ReportOutcome.FAILED
        if deferred:
            log.info("node %s: a yarn-operator reports YARN (%s): our entry %s removed", self._node,
                     self.cfg.operator_entry, self.cfg.allocation_name)
            return ReportOutcome.DEFERRED
        if value != self._last_value:
            log.info("node %s: %s = %s", self._node, THIRD_PARTY_ANNOTATION, value)
        self._last_value = value
        self._last_at = self._clock()
        return ReportOutcome.PATCHED

    def _patch(self, body: dict[str, Any]) -> bool:
        """Send the merge patch; False (logged) when it failed; _Conflict on 409."""
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:  # the answer is the whole Node: not deserialized, only read (capped) to free the connection
            resp = self._api.patch_node(self._node, body, _content_type=MERGE_PATCH,
                                        _request_timeout=self._timeout, _preload_content=False)
            read_capped(raw_response(resp), self._max_body, f"PATCH node {self._node}")
        except ApiBodyError as err:
            log.warning("node %s patched, answer dropped: %s", self._node, err)
        except ApiException as err:
            if err.status == 409:
                raise _Conflict from err
            log.warning("could not patch node %s annotation %s: HTTP %s %s",
                        self._node, THIRD_PARTY_ANNOTATION, err.status, err.reason)
            return False
        except (HTTPError, OSError) as err:
            log.warning("could not patch node %s: API server unreachable: %s", self._node, err)
            return False
        return True

    def _get(self) -> tuple[dict[str, str], str] | None:
        """The Node's annotations and resourceVersion; None (logged) when it cannot be read."""
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        where = f"GET node {self._node}"
        try:
            resp = self._api.read_node(self._node, _request_timeout=self._timeout, _preload_content=False)
            node = read_capped_json(raw_response(resp), self._max_body, where)
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
        meta = node.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if not isinstance(version, str) or not version:
            log.warning("could not read node %s: no metadata.resourceVersion", self._node)
            return None
        return ann, version

    def read(self) -> NodeAnnotations | None:
        """Blocking GET of the Node, read up to `max_body_bytes`; None (logged) when the API server does not
        answer, or answers a body over the cap or not a Node."""
        got = self._get()
        if got is None:
            return None
        ann, _ = got
        return NodeAnnotations(ann.get(ORIGIN_ANNOTATION), ann.get(THIRD_PARTY_ANNOTATION))

    async def areport(self, yarn_allocated: Resources) -> ReportOutcome:
        return await asyncio.to_thread(self.report, yarn_allocated)

    async def awithdraw(self) -> bool:
        """`withdraw` off the event loop; True once nothing of ours is left there."""
        return await asyncio.to_thread(self.withdraw) in (ReportOutcome.PATCHED, ReportOutcome.UNCHANGED)

    async def aread(self) -> NodeAnnotations | None:
        return await asyncio.to_thread(self.read)
