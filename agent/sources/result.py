"""What a source hands the loop: workloads (without usage), how fresh they are, and side tables."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from qos.batch_limits import BatchPod
from qos.model import Resources, Workload


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What a pod carries besides its Workload: for the shaper (IPs), the evictor, the NM discovery."""

    uid: str
    namespace: str
    name: str
    phase: str
    qos_class: str  # Kubernetes status.qosClass
    koord_qos: str | None  # label koordinator.sh/qosClass
    priority_class: str
    host_network: bool
    pod_ips: tuple[str, ...]
    container_ids: tuple[str, ...]  # runtime://id as the kubelet reports them
    labels: Mapping[str, str]
    batch_requests: Resources  # kubernetes.io/batch-cpu (milli) / batch-memory (bytes)
    limits: Resources
    protected_by: str = ""  # why the pod is protected (qos.protection), "" when it is not
    batch: BatchPod | None = None  # labelled koordinator.sh/qosClass=BE: its containers' batch resources


@dataclass(frozen=True, slots=True)
class YarnContainerInfo:
    """A YARN container as the NodeManager and the cgroup tree see it.

    `state` is the NM state ("" when only the cgroup knows it); `has_cgroup` False means pending launch;
    `known_to_nm` False means a `container_*` cgroup the NodeManager does not list (still BE usage).
    """

    container_id: str
    app_id: str
    state: str
    user: str
    has_cgroup: bool
    known_to_nm: bool
    execution_type: str = ""


@dataclass(frozen=True, slots=True)
class SourceResult:
    workloads: tuple[Workload, ...]
    stale_reason: str | None
    age_s: float
    pods: Mapping[str, PodInfo] = field(default_factory=dict)  # workload key -> pod
    containers: Mapping[str, YarnContainerInfo] = field(default_factory=dict)  # workload key -> container
    rejected: tuple[str, ...] = ()  # one clear reason per entry dropped from the last answer

    @property
    def stale(self) -> bool:
        return self.stale_reason is not None


# An answer larger than the cap means the node holds more than the agent can read: the last good list is
# missing work, so it is not acted on, even within the staleness bound.
STALE_AT_ONCE = frozenset({"too_large"})


class Freshness:
    """Tracks the last good answer of one source and says when its data is too old to act on.

    Logs one line when a source starts failing, when the reason changes, at most once a minute while it
    keeps failing, and once when it recovers.
    """

    def __init__(self, name: str, stale_after_s: float, log: logging.Logger,
                 clock: Callable[[], float] = time.monotonic, repeat_s: float = 60.0) -> None:
        self.name = name
        self.stale_after_s = stale_after_s
        self._log = log
        self._clock = clock
        self._repeat_s = repeat_s
        self.last_good: float | None = None
        self.last_error: str | None = None
        self._logged_at = -math.inf
        self._last_kind = ""
        self.failures = 0

    def ok(self) -> None:
        if self.last_error is not None:
            self._log.info("%s: answering again after %d failed fetches", self.name, self.failures)
        self.last_good = self._clock()
        self.last_error = None
        self.failures = 0

    def failed(self, reason: str, kind: str = "") -> None:
        now = self._clock()
        changed = self.last_error is None or kind != self._last_kind
        self.failures += 1
        self.last_error = reason
        self._last_kind = kind
        if changed or now - self._logged_at >= self._repeat_s:
            self._logged_at = now
            keep = "keeping the last good data" if self.last_good is not None else "no data yet"
            self._log.warning("%s: %s (%s, age %.1fs)", self.name, reason, keep, self.age_s())

    def age_s(self) -> float:
        return math.inf if self.last_good is None else max(0.0, self._clock() - self.last_good)

    def stale_reason(self) -> str | None:
        age = self.age_s()
        if self.last_error is not None and self._last_kind in STALE_AT_ONCE:
            return f"{self.name}: {self.last_error}"
        if self.last_good is None:
            return f"{self.name}: no good answer yet" + (f" ({self.last_error})" if self.last_error else "")
        if age > self.stale_after_s:
            why = f": {self.last_error}" if self.last_error else ""
            return f"{self.name}: last good data is {age:.0f}s old (bound {self.stale_after_s:.0f}s){why}"
        return None
