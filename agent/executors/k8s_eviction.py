"""Evict a Kubernetes pod through the `policy/v1` Eviction subresource, with a UID precondition.

The API server answers 201 (evicted), 429 (a PodDisruptionBudget forbids it now: take the next victim),
404 (already gone), 409 (the UID precondition failed: a different pod now has that name). A Warning Event
on the pod names the reason and the numbers. An evicted UID is remembered for `evicted_memory_s` and not
evicted again meanwhile. A pod that is not BE is refused unless `evict_non_be` is set.
The official client is blocking: the `async` methods run it in a worker thread.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from agent.config.sources import KubeApiConfig
from agent.executors.apply import EvictOutcome
from qos.actions import Evict
from qos.ids import IdError, check_pod_uid
from qos.model import Source, Workload

log = logging.getLogger("coloc.executors.k8s")

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_EVENT_MESSAGE = 1024


class EvictionOutcome(enum.Enum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: PodDisruptionBudget
    GONE = "gone"  # 404
    CONFLICT = "conflict"  # 409: UID precondition failed
    ALREADY_EVICTED = "already_evicted"
    REFUSED = "refused"  # never sent: not BE, bad input
    FAILED = "failed"  # 5xx, network, timeout


@dataclass(frozen=True, slots=True)
class EvictionResult:
    key: str
    outcome: EvictionOutcome
    detail: str
    status: int | None = None

    @property
    def ok(self) -> bool:
        """The pod is on its way out (evicted now or within the window) or already gone."""
        return self.outcome in (EvictionOutcome.EVICTED, EvictionOutcome.GONE,
                                EvictionOutcome.ALREADY_EVICTED)

    @property
    def try_next(self) -> bool:
        """The loop may take the next victim instead: this one cannot be evicted now."""
        return self.outcome in (EvictionOutcome.BLOCKED, EvictionOutcome.CONFLICT, EvictionOutcome.REFUSED)


def _status_message(err: ApiException) -> str:
    """The `message` of the Status body the API server sent, else the HTTP reason."""
    try:
        doc = json.loads(err.body) if isinstance(err.body, str | bytes) else None
    except ValueError:
        doc = None
    message = doc.get("message") if isinstance(doc, dict) else None
    return str(message)[:300] if message else str(err.reason or "")


def _numbers_text(numbers: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(numbers.items()))


class K8sEvictor:
    """Evicts BE pods through the API server; also the `Evictor` the action executor calls for K8S."""

    def __init__(self, cfg: KubeApiConfig, api_client: client.ApiClient, node_name: str = "", *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from kubernetes import client  # lazy: docs/dependencies.md
        self.cfg = cfg
        self._api = client.CoreV1Api(api_client)
        self._node = node_name
        self._clock = clock
        self._lock = threading.Lock()  # guards _evicted: calls may run in several worker threads
        self._evicted: dict[str, float] = {}

    def recently_evicted(self, uid: str) -> bool:
        with self._lock:
            at = self._evicted.get(uid)
            return at is not None and self._clock() - at < self.cfg.evicted_memory_s

    def _remember(self, uid: str) -> None:
        now = self._clock()
        with self._lock:
            self._evicted[uid] = now
            for old in [u for u, t in self._evicted.items() if now - t >= self.cfg.evicted_memory_s]:
                del self._evicted[old]

    def _check(self, w: Workload) -> str:
        """The pod UID, or raise ValueError saying why this workload may not be evicted here."""
        if w.source is not Source.K8S or not w.key.startswith("k8s/"):
            raise ValueError(f"{w.key}: not a Kubernetes pod")
        try:
            uid = check_pod_uid(w.key.removeprefix("k8s/"))
        except IdError as err:
            raise ValueError(str(err)) from err
        if not _DNS_SUBDOMAIN.fullmatch(w.name or "") or not _DNS_LABEL.fullmatch(w.namespace or ""):
            raise ValueError(f"{w.key}: pod name {w.name!r:.80} / namespace {w.namespace!r:.80} is not valid")
        if not w.be and not self.cfg.evict_non_be:
            raise ValueError(f"{w.namespace}/{w.name} is not BE and sources.kube_api.evict_non_be is off")
        return uid

    def evict_pod(self, w: Workload, reason: str, message: str,
                  numbers: Mapping[str, float] | None = None) -> EvictionResult:
        """Blocking: POST the Eviction, then the Event. Never raises for API or network errors."""
        from kubernetes import client  # lazy: docs/dependencies.md
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:
            uid = self._check(w)
        except ValueError as err:
            log.warning("eviction refused: %s", err)
            return EvictionResult(w.key, EvictionOutcome.REFUSED, str(err))
        if self.recently_evicted(uid):
            return EvictionResult(
                w.key, EvictionOutcome.ALREADY_EVICTED,
                f"{w.namespace}/{w.name} was evicted less than {self.cfg.evicted_memory_s:g}s ago")
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=client.V1ObjectMeta(name=w.name, namespace=w.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)))
        pod = f"{w.namespace}/{w.name}"
        try:
            self._api.create_namespaced_pod_eviction(
                w.name, w.namespace, body, _headers={"Content-Type": "application/json"},
                _request_timeout=self.cfg.timeout_s)
        except ApiException as err:
            status = int(err.status) if err.status is not None else None
            text = _status_message(err)
            if status == 429:
                result = EvictionResult(w.key, EvictionOutcome.BLOCKED,
                                        f"{pod}: eviction refused (429, disruption budget): {text}", status)
                self._event(w, uid, "EvictionBlocked", f"{reason}: {message}", numbers=numbers, extra=text)
            elif status == 404:
                self._remember(uid)
                result = EvictionResult(w.key, EvictionOutcome.GONE, f"{pod}: already gone (404)", status)
            elif status == 409:
                result = EvictionResult(
                    w.key, EvictionOutcome.CONFLICT,
                    f"{pod}: UID precondition failed (409), a different pod has the name: {text}", status)
            else:
                result = EvictionResult(
                    w.key, EvictionOutcome.FAILED, f"{pod}: HTTP {status}: {text}", status)
            log.warning("eviction of %s: %s", pod, result.detail)
            return result
        except (HTTPError, OSError) as err:
            log.warning("eviction of %s: API server unreachable: %s", pod, err)
            return EvictionResult(w.key, EvictionOutcome.FAILED, f"{pod}: API server unreachable: {err}")
        self._remember(uid)
        self._event(w, uid, "Evicted", f"{reason}: {message}", numbers=numbers, extra="")
        log.info("evicted %s (uid %s): %s: %s", pod, uid, reason, message)
        return EvictionResult(w.key, EvictionOutcome.EVICTED, f"{pod}: evicted (201)", 201)

    def notice_pod(self, w: Workload, event_reason: str, message: str) -> None:
        """A Warning Event on a pod that is not being evicted (e.g. the node is decommissioning)."""
        self._event(w, w.key.removeprefix("k8s/"), event_reason, message, numbers=None, extra="",
                    text=f"{self.cfg.event_component}: pod {w.namespace}/{w.name}: {message}")

    def _event(self, w: Workload, uid: str, event_reason: str, why: str, *,
               numbers: Mapping[str, float] | None, extra: str, text: str = "") -> None:
        """A Warning Event on the pod; failing to post it is logged, never fatal."""
        from kubernetes import client  # lazy: docs/dependencies.md
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        what = "evicted" if event_reason == "Evicted" else "could not evict"
        text = text or f"{self.cfg.event_component} {what} pod {w.namespace}/{w.name}: {why}"
        if numbers:
            text += f" [{_numbers_text(numbers)}]"
        if extra:
            text += f" ({extra})"
        if len(text) > MAX_EVENT_MESSAGE:
            text = text[: MAX_EVENT_MESSAGE - 3] + "..."
        now = datetime.now(UTC).replace(microsecond=0)
        event = client.CoreV1Event(
            api_version="v1", kind="Event",
            metadata=client.V1ObjectMeta(name=f"{w.name}.{time.time_ns():x}"[:253], namespace=w.namespace),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", name=w.name, namespace=w.namespace, uid=uid),
            reason=event_reason, message=text, type="Warning",
            source=client.V1EventSource(component=self.cfg.event_component, host=self._node or None),
            reporting_component=self.cfg.event_component, reporting_instance=self._node or None,
            first_timestamp=now, last_timestamp=now, count=1)
        try:
            self._api.create_namespaced_event(
                w.namespace, event, _headers={"Content-Type": "application/json"},
                _request_timeout=self.cfg.timeout_s)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("could not post the %s event for %s/%s: %s", event_reason, w.namespace, w.name, err)

    async def aevict_pod(self, w: Workload, reason: str, message: str,
                         numbers: Mapping[str, float] | None = None) -> EvictionResult:
        return await asyncio.to_thread(self.evict_pod, w, reason, message, numbers)

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        """The `Evictor` protocol of the action executor."""
        r = await self.aevict_pod(workload, action.reason.value, action.message, action.numbers)
        return EvictOutcome(r.ok, f"{r.outcome.value}: {r.detail}", try_next=r.try_next)
