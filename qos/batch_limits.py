"""Batch resources turned into cgroup limits: a BE pod's `kubernetes.io/batch-cpu` / `batch-memory` at pod and
container level, by koordlet's `batchresource` formulas (docs/batch-resources.md gives each with its source).

The kubelet does not understand the batch resources, so a BE pod's cgroup carries none of its own (BestEffort:
`cpu.shares` 2, no quota, no memory limit). Per cgroup:

- `cpu.shares` = clamp(Σ batch-cpu requests × 1024 / 1000, 2, 262144) (v2: `cpu.weight` by the kubelet's
  linear map, done by the writer);
- CFS quota = Σ batch-cpu limits × 100 µs per 100 ms period, at least 1000 µs; unlimited when a container has
  no limit, and unlimited everywhere when the BE tier is suppressed by a quota (the tier's quota must stay
  at or above its children's on v1);
- memory limit = Σ batch-memory limits; unlimited when a container has none.

A pod's sums run over its (non-init) containers that carry a batch resource; a container with none is left
out. The pod spec wins; the `node.koordinator.sh/extended-resource-spec` annotation is read only when no
container of the spec carries a batch resource (and, per container, for a container whose spec carries none).
Integer arithmetic throughout, rounded down as koordlet's int64 arithmetic is. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from qos.batch import BATCH_CPU, BATCH_MEMORY
from qos.quantity import QuantityError, to_int
from qos.suppression import CFS_QUOTA, SuppressionConfig, quota_under_cpuset

EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"

KUBELET_BE_SHARES = 2  # what the kubelet gives a BestEffort pod: the value restored when we let go
SHARES_MIN, SHARES_MAX = 2, 262_144
SHARE_UNIT = 1024
CFS_PERIOD_US = 100_000
QUOTA_MIN_US = 1000
# Bounds of one container's amounts read from the annotation (the kubelet source bounds the spec's alike).
MAX_MILLI_CPU = 10_000_000
MAX_MEMORY_BYTES = 1 << 50
MAX_ANNOTATION_CONTAINERS = 256
MAX_ANNOTATION_BYTES = 64 * 1024


class ExtendedSpecError(ValueError):
    """The extended-resource-spec annotation is malformed; the message says where."""


@dataclass(frozen=True, slots=True)
class BatchAmounts:
    """One container's batch resources as declared; None where one is not given. CPU in milli-cores,
    memory in bytes (the batch-cpu quantity is a count of milli-cores, as Koordinator writes it). A
    batch-memory request sets no limit (koordlet's hook reads only the memory limit), so it is not kept."""

    cpu_request: int | None = None
    cpu_limit: int | None = None
    memory_limit: int | None = None


@dataclass(frozen=True, slots=True)
class BatchContainer:
    """A container of a BE pod. `cgroup` is None until the runtime has made it (no container id yet);
    `spec` is None when its spec carries no batch resource; `init` for an init container (never in the
    pod's sums)."""

    name: str
    cgroup: str | None
    spec: BatchAmounts | None
    init: bool = False


@dataclass(frozen=True, slots=True)
class BatchPod:
    """A pod labelled `koordinator.sh/qosClass: BE`: its cgroup, containers and the annotation's raw text."""

    key: str
    name: str  # <namespace>/<name>, for messages
    cgroup: str
    containers: tuple[BatchContainer, ...]
    annotation: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """What one cgroup gets: `cfs_quota_us` per `CFS_PERIOD_US`, None = unlimited; memory None = unlimited."""

    rel: str
    cpu_shares: int
    cfs_quota_us: int | None
    memory_limit_bytes: int | None


@dataclass(frozen=True, slots=True)
class PodPlan:
    """The limits of one pod. `pod` is None when nothing declares a batch resource (its cgroups are left as
    the kubelet made them); `source` says where the amounts came from ("spec", "annotation" or "");
    `error` names what made a needed annotation unusable (then nothing is set)."""

    key: str
    name: str
    pod: Limits | None
    containers: tuple[Limits, ...] = ()
    source: str = ""
    error: str = ""


# -- the conversions (koordlet pkg/koordlet/util/system/cgroup.go) ---------------------------------------


def milli_cpu_to_shares(milli: int) -> int:
    """`MilliCPUToShares`: milli × 1024 / 1000 rounded down, clamped to [2, 262144]; ≤ 0 gives 2."""
    if milli <= 0:
        return SHARES_MIN
    return max(SHARES_MIN, min(SHARES_MAX, milli * SHARE_UNIT // 1000))


def milli_cpu_to_quota(milli: int) -> int | None:
    """`MilliCPUToQuota`: milli × 100000 / 1000 µs rounded down, at least 1000; ≤ 0 is unlimited (None)."""
    quota = milli * CFS_PERIOD_US // 1000
    if quota <= 0:
        return None
    return max(quota, QUOTA_MIN_US)


# -- the annotation --------------------------------------------------------------------------------------


def _amount(raw: object, where: str, bound: int) -> int:
    try:
        value = to_int(raw)
    except QuantityError as err:
        raise ExtendedSpecError(f"{where}: {err}") from None
    if not 0 <= value <= bound:
        raise ExtendedSpecError(f"{where}: {raw!r} is out of range [0, {bound}]")
    return value


def _resource_list(raw: object, where: str) -> tuple[int | None, int | None]:
    """(batch-cpu, batch-memory) of a ResourceList; other resources are not ours to read."""
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        raise ExtendedSpecError(f"{where}: expected an object, got {type(raw).__name__}")
    cpu = _amount(raw[BATCH_CPU], f"{where}.{BATCH_CPU}", MAX_MILLI_CPU) if BATCH_CPU in raw else None
    mem = (_amount(raw[BATCH_MEMORY], f"{where}.{BATCH_MEMORY}", MAX_MEMORY_BYTES)
           if BATCH_MEMORY in raw else None)
    return cpu, mem


def parse_extended_resource_spec(text: str) -> dict[str, BatchAmounts]:
    """The annotation `{"containers": {"<name>": {"requests": {...}, "limits": {...}}}}` → amounts per
    container name. Raises ExtendedSpecError naming the field."""
    what = EXTENDED_RESOURCE_SPEC
    if len(text) > MAX_ANNOTATION_BYTES:
        raise ExtendedSpecError(f"{what}: {len(text)} bytes, more than {MAX_ANNOTATION_BYTES}")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ExtendedSpecError(f"{what}: not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise ExtendedSpecError(f"{what}: expected an object, got {type(doc).__name__}")
    containers = doc.get("containers")
    if containers is None:
        return {}
    if not isinstance(containers, dict):
        raise ExtendedSpecError(f"{what}.containers: expected an object, got {type(containers).__name__}")
    if len(containers) > MAX_ANNOTATION_CONTAINERS:
        raise ExtendedSpecError(f"{what}.containers: more than {MAX_ANNOTATION_CONTAINERS} entries")
    out: dict[str, BatchAmounts] = {}
    for name, entry in containers.items():
        at = f"{what}.containers[{name[:64]!r}]"
        if not isinstance(entry, dict):
            raise ExtendedSpecError(f"{at}: expected an object, got {type(entry).__name__}")
        req_cpu, _ = _resource_list(entry.get("requests"), f"{at}.requests")
        lim_cpu, lim_mem = _resource_list(entry.get("limits"), f"{at}.limits")
        out[name] = BatchAmounts(req_cpu, lim_cpu, lim_mem)
    return out


# -- the formulas (koordlet pkg/koordlet/runtimehooks/hooks/batchresource/batch_resource.go) ---------------


def pod_level(amounts: Iterable[BatchAmounts], rel: str, *, cfs_quota: bool = True) -> Limits:
    """`SetPodCPUShares` / `SetPodCFSQuota` / `SetPodMemoryLimit` over the containers that declare a batch
    resource: shares from Σ positive requests; quota and memory from Σ limits, unlimited as soon as one
    container has none (or a non-positive one)."""
    cpu_req = 0
    cpu_lim: int | None = 0
    mem_lim: int | None = 0
    for a in amounts:
        if a.cpu_request is not None and a.cpu_request > 0:
            cpu_req += a.cpu_request
        cpu_lim = None if cpu_lim is None or not a.cpu_limit or a.cpu_limit <= 0 else cpu_lim + a.cpu_limit
        mem_lim = (None if mem_lim is None or not a.memory_limit or a.memory_limit <= 0
                   else mem_lim + a.memory_limit)
    quota = milli_cpu_to_quota(cpu_lim) if cfs_quota and cpu_lim is not None else None
    return Limits(rel, milli_cpu_to_shares(cpu_req), quota, mem_lim or None)


def container_level(a: BatchAmounts, rel: str, *, cfs_quota: bool = True) -> Limits:
    """`SetContainerCPUShares` / `SetContainerCFSQuota` / `SetContainerMemoryLimit` from its own values."""
    quota = milli_cpu_to_quota(a.cpu_limit or 0) if cfs_quota else None
    memory = a.memory_limit if a.memory_limit is not None and a.memory_limit > 0 else None
    return Limits(rel, milli_cpu_to_shares(a.cpu_request or 0), quota, memory)


def pod_limits(pod: BatchPod, *, cfs_quota: bool = True) -> PodPlan:
    """The plan of one BE pod (see the module's docstring). A malformed annotation that is needed leaves the
    pod alone, with the reason; one that is not needed (the spec declares the amounts) is not read."""
    declared = {c.name: c.spec for c in pod.containers if c.spec is not None and not c.init}
    annotation: dict[str, BatchAmounts] | None = None
    error = ""
    needs_annotation = not declared or any(c.spec is None for c in pod.containers)
    if pod.annotation is not None and needs_annotation:
        try:
            annotation = parse_extended_resource_spec(pod.annotation)
        except ExtendedSpecError as err:
            error = str(err)
    if declared:
        source, chosen = "spec", declared
    elif annotation:
        source, chosen = "annotation", annotation
    else:
        return PodPlan(pod.key, pod.name, None, source="", error=error)
    containers: list[Limits] = []
    for c in pod.containers:
        own = c.spec if c.spec is not None else (annotation or {}).get(c.name)
        if own is not None and c.cgroup is not None:
            containers.append(container_level(own, c.cgroup, cfs_quota=cfs_quota))
    return PodPlan(pod.key, pod.name, pod_level(chosen.values(), pod.cgroup, cfs_quota=cfs_quota),
                   tuple(containers), source, error)


def plan(pods: Iterable[BatchPod], *, cfs_quota: bool = True) -> tuple[PodPlan, ...]:
    """Every BE pod's plan, in the order given."""
    return tuple(pod_limits(p, cfs_quota=cfs_quota) for p in pods)


def pod_quota_allowed(suppression: SuppressionConfig) -> bool:
    """koordlet's rule (batchresource/rule.go): while the BE tier is suppressed by a CFS quota, BE pods and
    containers get no quota of their own (v1 refuses a parent's quota below a child's, so the tier's would
    fail); shares and the tier's quota bound them then."""
    return not (suppression.enabled and (suppression.policy == CFS_QUOTA or quota_under_cpuset(suppression)))
