"""CPU burst on upstream kernels: `cpu.cfs_burst_us` (v1, kernel ≥ 5.14) / `cpu.max.burst` (v2) of pods and
their containers, by koordlet's `CPUBurst` strategy, its `cpuBurstOnly` part (docs/batch-resources.md).
Pure: no I/O.

Per container with a CPU limit: burst = limit (cores) × cpuBurstPercent / 100 × 100000 µs = limit (milli) ×
cpuBurstPercent µs (`calcStaticCPUBurstVal`); none without a limit; per pod the Σ of its made containers'
(`applyCPUBurst`). Only pods koordlet deems burstable (`IsPodCPUBurstable`: not labelled LSR, LSE or BE).

Two changes, both because the kernel refuses a burst above the cgroup's CFS quota (EINVAL) and, once a burst
is in place, refuses any quota below it (`tg_set_cfs_bandwidth`):
- the burst is held at or below the quota the kubelet gives the cgroup (limit × 100 µs per 100 ms):
  koordlet's default 1000 % would be refused at every write here;
- where the kubelet resizes pods in place (InPlacePodVerticalScaling: it then reports each running
  container's `resources` in its status), a lowered CPU limit is a smaller quota written by the kubelet (pod
  cgroup) and the runtime (container cgroup) into the very cgroups that hold a burst, and that write would
  fail while the burst stays — also after the agent is killed. There no burst is held on a pod cgroup, nor on
  a container a CPU resize does not restart (`resizePolicy` cpu: RestartContainer makes a new cgroup
  instead): 0 there, which also clears a burst left by an earlier run of the agent. Not known yet (no running
  container seen) counts as resizing (docs/coexistence.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from qos.memory_qos import QosPod
from qos.validation import bounded, check_bounds, check_choices

CFS_PERIOD_US = 100_000
Policy = Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"]
POLICIES: tuple[str, ...] = get_args(Policy)
NOT_BURSTABLE = ("LSR", "LSE", "BE")


@dataclass(frozen=True, slots=True)
class CpuBurstSettings:
    """`cpuBurstStrategy` (koordlet's `CPUBurstConfig`): `policy` none | cpuBurstOnly | cfsQuotaBurstOnly |
    auto (the burst files are written under cpuBurstOnly and auto; the quota scaling is not done here)."""

    policy: Policy = "none"
    # a container's CPU burst, as a percent of its CPU limit (held at or below its quota)
    cpu_burst_percent: int = bounded(1000, 1, 10000)

    def __post_init__(self) -> None:
        check_bounds(self, "", ValueError)
        check_choices(self, "")

    @property
    def enabled(self) -> bool:
        """`cpuBurstEnabled`."""
        return self.policy in ("cpuBurstOnly", "auto")


@dataclass(frozen=True, slots=True)
class BurstValues:
    rel: str
    burst_us: int


@dataclass(frozen=True, slots=True)
class CpuBurstPlan:
    cgroups: tuple[BurstValues, ...]
    pods: Mapping[str, tuple[BurstValues, ...]]  # pod name -> its pod and container values


def container_burst(limit_milli: int | None, percent: int) -> int:
    """`calcStaticCPUBurstVal`, held at the container's quota (limit × 100 µs): 0 without a limit."""
    if limit_milli is None or limit_milli <= 0:
        return 0
    return min(limit_milli * percent, limit_milli * CFS_PERIOD_US // 1000)


def burstable(pod: QosPod) -> bool:
    return not pod.protected and pod.koord_label not in NOT_BURSTABLE


def pod_burst(pod: QosPod, settings: CpuBurstSettings) -> tuple[BurstValues, ...]:
    """The pod's and its made containers' bursts (pod = Σ, held at the pod's quota when every container is
    limited: the kubelet's pod quota is then Σ limits × 100 µs)."""
    made = [c for c in pod.containers if c.cgroup is not None]
    own = [BurstValues(c.cgroup, container_burst(c.cpu_limit_milli, settings.cpu_burst_percent))
           for c in made if c.cgroup is not None]
    total = sum(b.burst_us for b in own)
    limits = [c.cpu_limit_milli for c in pod.containers]
    if all(x is not None and x > 0 for x in limits):
        total = min(total, sum(x for x in limits if x) * CFS_PERIOD_US // 1000)
    return (BurstValues(pod.cgroup, total), *own)


def resize_safe(pod: QosPod, values: tuple[BurstValues, ...]) -> tuple[BurstValues, ...]:
    """`values` with 0 wherever an in-place resize writes the quota: all but the containers a CPU resize
    restarts. A 0, not nothing: a burst an earlier run of the agent left there is taken away too."""
    restarts = {c.cgroup for c in pod.containers if c.cgroup is not None and c.cpu_resize_restarts}
    return tuple(v if v.rel in restarts else BurstValues(v.rel, 0) for v in values)


def plan(pods: Iterable[QosPod], settings: CpuBurstSettings, *, kubelet_resizes: bool | None) -> CpuBurstPlan:
    """Every burstable pod's values (none at all when the policy writes no burst); where the kubelet resizes
    pods in place, or may (None), only `resize_safe` ones."""
    if not settings.enabled:
        return CpuBurstPlan((), {})
    resizes = kubelet_resizes is not False
    per_pod = {p.name: resize_safe(p, pod_burst(p, settings)) if resizes else pod_burst(p, settings)
               for p in pods if burstable(p)}
    return CpuBurstPlan(tuple(v for vs in per_pod.values() for v in vs), per_pod)
