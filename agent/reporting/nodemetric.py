"""Koordinator's NodeMetric status written from the agent's own ticks, as koordlet writes it.

koord-manager creates `nodemetrics/<node>` with a spec only; we GET it, build the whole `status` from the
samples of the published ticks, and PUT it to the status subresource with the `resourceVersion` read
(409: read again and retry). A missing object is skipped (koordlet never creates it either). No write goes
out while our collection is stale: a fresh `updateTime` would make koord-manager trust old usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client
from urllib3.exceptions import HTTPError

from agent.config.sources import NodeMetricConfig
from agent.published import Published
from agent.reporting.nodemetric_status import CollectPolicy, PodSample, Sample, build_status, collect_policy
from agent.sources.kubeapi import ApiBodyError, get_cluster_object, raw_response, read_capped_json
from agent.sources.kubelet import koord_priority_class, koord_qos_class
from agent.sources.result import PodInfo
from qos.model import Source

log = logging.getLogger("coloc.reporting.nodemetric")

GROUP, VERSION, PLURAL = "slo.koordinator.sh", "v1alpha1", "nodemetrics"
SAMPLE_GAP_S = 1.0  # at most one sample a second, whatever the tick rate


class MetricOutcome(enum.Enum):
    WRITTEN = "written"
    STALE = "stale"  # our own collection is stale: nothing written
    ABSENT = "absent"  # no NodeMetric object (koord-manager not running or not there yet)
    FAILED = "failed"


class _Conflict(Exception):
    pass


def pod_sample(
    w_namespace: str, w_name: str, info: PodInfo | None, priority: int, cpu: float | None, mem: int | None
) -> PodSample:
    qos = koord_qos_class(info.koord_qos, info.qos_class) if info is not None else ""
    labels: Mapping[str, str] = info.labels if info is not None else {}
    return PodSample(w_namespace, w_name, koord_priority_class(labels, priority, qos), qos, cpu, mem)


class NodeMetricReporter:
    """`observe` each publication (loop thread); `sync` writes the status (a worker thread)."""

    def __init__(
        self,
        cfg: NodeMetricConfig,
        api_client: client.ApiClient,
        node_name: str,
        pods: Callable[[], Sequence[PodInfo]] = tuple,
        *,
        max_body_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        from kubernetes import client  # lazy: docs/dependencies.md
        if not node_name:
            raise ValueError("node name is empty: cannot report a NodeMetric")
        self.cfg = cfg
        self._api = client.CustomObjectsApi(api_client)
        self._node = node_name
        self._pods = pods
        self._max_body = max_body_bytes
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._samples: deque[Sample] = deque()
        self._stale: dict[str, str] = {}
        self._ok_at: float | None = None
        self.policy = CollectPolicy()
        self.last_outcome: MetricOutcome | None = None

    def age_s(self) -> float | None:
        """Seconds since our last successful write; None before the first."""
        return None if self._ok_at is None else max(0.0, self._clock() - self._ok_at)

    def observe(self, pub: Published) -> None:
        snap = pub.snapshot
        if snap is None:
            return
        infos = {p.uid: p for p in self._pods()}
        pods: dict[str, PodSample] = {}
        host_cpu: float | None = None
        host_mem: int | None = None
        for w in snap.workloads:
            if w.source is Source.K8S:
                info = infos.get(w.key.removeprefix("k8s/"))
                pods[w.key] = pod_sample(
                    w.namespace, w.name, info, w.priority, w.usage.milli_cpu, w.usage.memory_working_set_bytes
                )
            elif w.source is Source.YARN:
                host_cpu = (host_cpu or 0.0) + (w.usage.milli_cpu or 0.0)
                host_mem = (host_mem or 0) + (w.usage.memory_working_set_bytes or 0)
        sample = Sample(
            pub.tick_started_at,
            snap.node_usage.milli_cpu,
            snap.node_usage.memory_working_set_bytes,
            pods,
            host_cpu,
            host_mem,
        )
        keep = max((*self.policy.durations, self.policy.aggregate_s), default=300.0)
        with self._lock:
            self._stale = dict(snap.stale)
            if self._samples and sample.at - self._samples[-1].at < SAMPLE_GAP_S:
                return
            self._samples.append(sample)
            while self._samples and sample.at - self._samples[0].at > keep:
                self._samples.popleft()

    def _fresh(self) -> str | None:
        """Why our collection cannot be reported now (None: it can)."""
        with self._lock:
            stale = dict(self._stale)
            last = self._samples[-1].at if self._samples else None
        if last is None:
            return "no tick sampled yet"
        if stale:
            return "collection stale (" + ", ".join(f"{k}: {v}" for k, v in sorted(stale.items())) + ")"
        age = self._wall() - last
        if age > self.cfg.max_sample_age_s:
            return f"last tick is {age:.0f}s old"
        return None

    def sync(self) -> MetricOutcome:
        """Blocking: one status write (with conflict retries). Never raises for API or network errors."""
        why = self._fresh()
        if why is not None:
            log.warning("NodeMetric %s not written: %s", self._node, why)
            self.last_outcome = MetricOutcome.STALE
            return self.last_outcome
        for _ in range(self.cfg.max_conflict_retries):
            try:
                self.last_outcome = self._sync_once()
                return self.last_outcome
            except _Conflict:
                log.info("NodeMetric %s changed while written: reading it again", self._node)
        self.last_outcome = MetricOutcome.FAILED
        return self.last_outcome

    def _sync_once(self) -> MetricOutcome:
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:
            obj = dict(get_cluster_object(self._api, (GROUP, VERSION, PLURAL), self._node, self.cfg.timeout_s,
                                          self._max_body, f"GET nodemetric {self._node}"))
            self.policy = collect_policy(
                obj.get("spec"), self.cfg.min_report_interval_s, self.cfg.min_aggregate_s
            )
        except ApiException as err:
            if err.status == 404:
                log.info("NodeMetric %s does not exist (koord-manager creates it): not written", self._node)
                return MetricOutcome.ABSENT
            log.warning("could not read NodeMetric %s: HTTP %s %s", self._node, err.status, err.reason)
            return MetricOutcome.FAILED
        except (ApiBodyError, ValueError) as err:
            log.warning("NodeMetric %s not written: %s", self._node, err)
            return MetricOutcome.FAILED
        except (HTTPError, OSError) as err:
            log.warning("could not read NodeMetric %s: API server unreachable: %s", self._node, err)
            return MetricOutcome.FAILED
        with self._lock:
            samples = list(self._samples)
        status = build_status(samples, self.policy, self._wall(), self.cfg.host_application)
        if status is None:
            return MetricOutcome.STALE
        obj["status"] = status
        return self._put(obj)

    def _put(self, obj: dict[str, object]) -> MetricOutcome:
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:
            resp = self._api.replace_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                self._node,
                obj,
                _request_timeout=self.cfg.timeout_s,
                _preload_content=False,
            )
            read_capped_json(raw_response(resp), self._max_body, f"PUT nodemetric {self._node}/status")
        except ApiException as err:
            if err.status == 409:
                raise _Conflict from err
            log.warning(
                "could not write NodeMetric %s status: HTTP %s %s %s",
                self._node,
                err.status,
                err.reason,
                (err.body or "")[:300] if isinstance(err.body, str) else "",
            )
            return MetricOutcome.FAILED
        except ApiBodyError as err:
            log.warning("NodeMetric %s written, answer dropped: %s", self._node, err)
        except (HTTPError, OSError) as err:
            log.warning("could not write NodeMetric %s: API server unreachable: %s", self._node, err)
            return MetricOutcome.FAILED
        self._ok_at = self._clock()
        return MetricOutcome.WRITTEN

    async def run(self, stop: asyncio.Event) -> None:
        """Write every `reportIntervalSeconds` (as the object's spec says, clamped); 1 s after a miss."""
        while not stop.is_set():
            outcome = MetricOutcome.FAILED
            try:
                outcome = await asyncio.to_thread(self.sync)
            except Exception:
                log.exception("NodeMetric report failed")
            wait = (
                self.policy.report_s if outcome is MetricOutcome.WRITTEN else min(self.policy.report_s, 1.0)
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
