"""Memory QoS on upstream kernels: `memory.min`, `memory.low` and `memory.high` of pods, their containers
and the QoS tiers, by koordlet's `CgroupReconcile` formulas (docs/batch-resources.md gives each with its
source). Pure: no I/O.

Per pod (Σ over its containers' memory requests; a BE pod's batch-memory requests, an unset one as 0):
`memory.min` = Σ req × minLimitPercent / 100, `memory.low` = Σ req × lowLimitPercent / 100 (at least min when
positive). Per container, the same from its own request, and `memory.high` = ⌊(req + (limit − req) ×
throttlingPercent / 100) / page⌋ × page, with the node's allocatable memory for an unset limit and "max" for a
throttlingPercent of 0 (at least min when positive). Per QoS tier, the sums of its pods' min and low; the
kubepods root (koordlet's Guaranteed level) the sums of all. Integer arithmetic, rounded down as koordlet's
int64 is. koordlet's Alinux-only knobs (wmark, priority, OOM group, page-cache limit) are not written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from qos.validation import bounded, check_bounds

PAGE_SIZE = 4096
KOORD_CLASSES = ("LSE", "LSR", "LS", "BE", "SYSTEM")
_FROM_KUBE = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}
TIERS = ("guaranteed", "burstable", "besteffort")


@dataclass(frozen=True, slots=True)
class MemoryQosClass:
    """One class's `memoryQOS` (koordlet's `MemoryQOSCfg`): percents of the memory request (min, low) and of
    the room between request and limit (throttling). `enable: false` is koordlet's `NoneMemoryQOS` (all 0)."""

    # memory QoS for this class (as a NodeSLO's memoryQOS.enable)
    enable: bool = False
    # memory.min = this percent of the memory request
    min_limit_percent: int = bounded(0, 0, 100)
    # memory.low = this percent of the memory request
    low_limit_percent: int = bounded(0, 0, 100)
    # container memory.high = request + this percent of (limit − request); 0: max
    throttling_percent: int = bounded(0, 0, 100)

    def __post_init__(self) -> None:
        check_bounds(self, "", ValueError)

    def effective(self) -> MemoryQosClass:
        """What koordlet applies: the percents, or all 0 when disabled (`mergeNoneMemoryQOSIfDisabled`)."""
        return self if self.enable else MemoryQosClass()


@dataclass(frozen=True, slots=True)
class MemoryQosSettings:
    """`resourceQOSStrategy.{lsr,ls,be,system}Class.memoryQOS` (LSE takes LSR's, as koordlet does)."""

    lsr: MemoryQosClass = field(default_factory=MemoryQosClass)
    ls: MemoryQosClass = field(default_factory=MemoryQosClass)
    be: MemoryQosClass = field(default_factory=MemoryQosClass)
    system: MemoryQosClass = field(default_factory=MemoryQosClass)

    @property
    def any_enabled(self) -> bool:
        return any(c.enable for c in (self.lsr, self.ls, self.be, self.system))

    def of(self, koord_class: str) -> MemoryQosClass:
        """`GetPodResourceQoSByQoSClass`: the class's config (LSE → LSR)."""
        name = {"LSE": "lsr", "LSR": "lsr", "LS": "ls", "BE": "be", "SYSTEM": "system"}[koord_class]
        cfg: MemoryQosClass = getattr(self, name)
        return cfg.effective()


@dataclass(frozen=True, slots=True)
class QosContainer:
    """A container as memory QoS and CPU burst read it: requests and limits in bytes / milli-cores (a BE pod's
    batch resources), None where unset; `cgroup` None until the runtime made it."""

    name: str
    cgroup: str | None
    memory_request: int | None = None
    memory_limit: int | None = None
    cpu_limit_milli: int | None = None
    cpu_resize_restarts: bool = False  # `resizePolicy` cpu: RestartContainer (a resize makes a new cgroup)


@dataclass(frozen=True, slots=True)
class QosPod:
    """A pod: its Koordinator label (None: none), Kubernetes QoS class, tier and cgroup, whether it is
    protected (never touched) and its (non-init) containers."""

    key: str
    name: str
    cgroup: str
    kube_qos: str  # Guaranteed | Burstable | BestEffort
    koord_label: str | None
    containers: tuple[QosContainer, ...]
    protected: bool = False

    @property
    def koord_class(self) -> str:
        """`GetPodQoSClassWithDefault`: the label, else from the Kubernetes class."""
        if self.koord_label in KOORD_CLASSES:
            return self.koord_label
        return _FROM_KUBE.get(self.kube_qos, "LS")

    @property
    def tier(self) -> str:
        return self.kube_qos.lower()


@dataclass(frozen=True, slots=True)
class MemoryValues:
    """What one cgroup gets; `high_bytes` None is "max", written only where `sets_high` (containers)."""

    rel: str
    min_bytes: int
    low_bytes: int
    high_bytes: int | None = None
    sets_high: bool = False


@dataclass(frozen=True, slots=True)
class MemoryQosPlan:
    """Every pod's and container's values, and the tiers' sums (tier name -> (min, low))."""

    cgroups: tuple[MemoryValues, ...]
    tiers: Mapping[str, tuple[int, int]]
    pods: Mapping[str, tuple[MemoryValues, ...]]  # pod name -> its pod and container values


def _low_at_least_min(mn: int, low: int) -> int:
    """koordlet: "memory.low is no less than memory.min" (a positive low below min is raised)."""
    return mn if 0 < low < mn else low


def pod_request(pod: QosPod) -> int:
    """Σ of its containers' memory requests, an unset one as 0 (`GetPodRequest` /
    `GetPodBEMemoryByteRequestIgnoreUnlimited`)."""
    return sum(max(c.memory_request or 0, 0) for c in pod.containers)


def pod_values(pod: QosPod, cfg: MemoryQosClass) -> MemoryValues:
    """`calculatePodResources`: min and low from the pod's request; no memory.high at pod level."""
    req = pod_request(pod)
    mn = req * cfg.min_limit_percent // 100
    return MemoryValues(pod.cgroup, mn, _low_at_least_min(mn, req * cfg.low_limit_percent // 100))


def container_values(c: QosContainer, cfg: MemoryQosClass, node_allocatable: int) -> MemoryValues:
    """`calculateContainerResources`: min, low and high from its own request and limit."""
    assert c.cgroup is not None
    req = max(c.memory_request or 0, 0)
    mn = req * cfg.min_limit_percent // 100
    low = _low_at_least_min(mn, req * cfg.low_limit_percent // 100)
    high: int | None
    if cfg.throttling_percent == 0:
        high = None  # koordlet writes MaxInt64, i.e. "max"
    else:
        top = c.memory_limit if c.memory_limit is not None and c.memory_limit > 0 else node_allocatable
        high = (req + (top - req) * cfg.throttling_percent // 100) // PAGE_SIZE * PAGE_SIZE
        if 0 < high < mn:
            high = mn
    return MemoryValues(c.cgroup, mn, low, high, sets_high=True)


def plan(pods: Iterable[QosPod], settings: MemoryQosSettings, node_allocatable: int) -> MemoryQosPlan:
    """Every unprotected pod's values, its containers' (those made), and the tiers' sums."""
    out: list[MemoryValues] = []
    per_pod: dict[str, tuple[MemoryValues, ...]] = {}
    sums = {t: [0, 0] for t in TIERS}
    for pod in pods:
        if pod.protected:
            continue
        cfg = settings.of(pod.koord_class)
        pv = pod_values(pod, cfg)
        tier = sums.get(pod.tier)
        if tier is not None:
            tier[0] += pv.min_bytes
            tier[1] += pv.low_bytes
        values = (pv, *(container_values(c, cfg, node_allocatable) for c in pod.containers
                        if c.cgroup is not None))
        per_pod[pod.name] = values
        out.extend(values)
    # completeCgroupSummaryForQoS: the Guaranteed level is the kubepods root, above the other two tiers
    total = (sum(s[0] for s in sums.values()), sum(s[1] for s in sums.values()))
    tiers = {"burstable": tuple(sums["burstable"]), "besteffort": tuple(sums["besteffort"]), "": total}
    return MemoryQosPlan(tuple(out), tiers, per_pod)  # type: ignore[arg-type]
