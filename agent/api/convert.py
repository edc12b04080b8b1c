"""Ledger records ↔ `coloc.v1` messages. Times travel as integer milliseconds."""

from __future__ import annotations

from collections.abc import Mapping

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.executors.resource_qos import HeldLimits
from agent.state.errors import InvalidRequest
from agent.state.records import (
    AdmitRequest,
    Allocation,
    Application,
    DrainPhase,
    DrainStatus,
    EventType,
    Identity,
    Lifecycle,
    NodeRecord,
    Notice,
    Phase,
    Refusal,
    Tags,
)
from qos.model import IoSample, Resources, Source, Workload
from qos.policies import PolicyConfig

PROTOCOL = "coloc.v1"

SOURCE_TO_PB = {Source.K8S: pb.SOURCE_K8S, Source.YARN: pb.SOURCE_YARN, Source.LOCAL: pb.SOURCE_LOCAL}
SOURCE_FROM_PB = {v: k for k, v in SOURCE_TO_PB.items()}
PHASE_TO_PB = {Phase.PENDING_LAUNCH: pb.PHASE_PENDING_LAUNCH, Phase.RUNNING: pb.PHASE_RUNNING,
               Phase.TERMINATING: pb.PHASE_TERMINATING}
PHASE_FROM_PB = {v: k for k, v in PHASE_TO_PB.items()}
LIFECYCLE_TO_PB = {Lifecycle.RECOVERING: pb.LIFECYCLE_RECOVERING,
                   Lifecycle.SCHEDULABLE: pb.LIFECYCLE_SCHEDULABLE,
                   Lifecycle.DECOMMISSIONING: pb.LIFECYCLE_DECOMMISSIONING,
                   Lifecycle.DECOMMISSIONED: pb.LIFECYCLE_DECOMMISSIONED}
LIFECYCLE_FROM_PB = {v: k for k, v in LIFECYCLE_TO_PB.items()}
DRAIN_TO_PB = {DrainPhase.NONE: pb.DRAIN_PHASE_NONE,
               DrainPhase.WAIT_ALLOCATIONS: pb.DRAIN_PHASE_WAIT_ALLOCATIONS,
               DrainPhase.WAIT_APPS: pb.DRAIN_PHASE_WAIT_APPS, DrainPhase.TIMED_OUT: pb.DRAIN_PHASE_TIMED_OUT,
               DrainPhase.DRAINED: pb.DRAIN_PHASE_DRAINED}
DRAIN_FROM_PB = {v: k for k, v in DRAIN_TO_PB.items()}
EVENT_TO_PB = {EventType.ADDED: pb.EVENT_TYPE_ADDED, EventType.MODIFIED: pb.EVENT_TYPE_MODIFIED,
               EventType.DELETED: pb.EVENT_TYPE_DELETED, EventType.NOTICE: pb.EVENT_TYPE_NOTICE}
EVENT_FROM_PB = {v: k for k, v in EVENT_TO_PB.items()}
REFUSAL_TO_PB = {Refusal.NOT_SCHEDULABLE: pb.REFUSAL_NOT_SCHEDULABLE, Refusal.INSUFFICIENT_CPU:
                 pb.REFUSAL_INSUFFICIENT_CPU, Refusal.INSUFFICIENT_MEMORY: pb.REFUSAL_INSUFFICIENT_MEMORY,
                 Refusal.KEY_CONFLICT: pb.REFUSAL_KEY_CONFLICT,
                 Refusal.BUDGET_UNKNOWN: pb.REFUSAL_BUDGET_UNKNOWN}
REFUSAL_FROM_PB = {v: k for k, v in REFUSAL_TO_PB.items()}


def ms(t: float) -> int:
    return round(t * 1000)


def sec(t_ms: int) -> float:
    return t_ms / 1000.0


def resources_pb(r: Resources) -> pb.Resources:
    return pb.Resources(milli_cpu=r.milli_cpu, memory_bytes=r.memory_bytes)


def resources_from(r: pb.Resources) -> Resources:
    return Resources(r.milli_cpu, r.memory_bytes)


def tags_pb(tags: Tags) -> list[pb.Tag]:
    return [pb.Tag(key=k, value=v) for k, v in tags]


def tags_from(tags: object) -> Tags:
    return tuple((t.key, t.value) for t in tags)  # type: ignore[attr-defined]


def identity_pb(i: Identity) -> pb.Identity:
    return pb.Identity(node_id=i.node_id, incarnation=i.incarnation, boot_id=i.boot_id,
                       started_unix_ms=ms(i.started_at), agent_version=i.agent_version,
                       protocol_version=PROTOCOL, restarts=i.restarts)


def identity_from(m: pb.Identity) -> Identity:
    return Identity(m.node_id, m.incarnation, m.boot_id, sec(m.started_unix_ms), m.agent_version, m.restarts)


def drain_pb(d: DrainStatus) -> pb.DrainStatus:
    out = pb.DrainStatus(phase=DRAIN_TO_PB[d.phase], graceful=d.graceful, wait_for_apps=d.wait_for_apps,
                         started_unix_ms=ms(d.started_at), has_deadline=d.deadline is not None,
                         deadline_unix_ms=0 if d.deadline is None else ms(d.deadline),
                         request_id=d.request_id, reason=d.reason,
                         waiting_applications=d.waiting_applications, allocations_left=d.allocations_left)
    if d.previous_batch_allocatable is not None:
        out.previous_batch_allocatable.CopyFrom(resources_pb(d.previous_batch_allocatable))
    return out


def drain_from(m: pb.DrainStatus) -> DrainStatus:
    return DrainStatus(
        phase=DRAIN_FROM_PB.get(m.phase, DrainPhase.NONE), graceful=m.graceful, wait_for_apps=m.wait_for_apps,
        started_at=sec(m.started_unix_ms), deadline=sec(m.deadline_unix_ms) if m.has_deadline else None,
        previous_batch_allocatable=(resources_from(m.previous_batch_allocatable)
                                    if m.HasField("previous_batch_allocatable") else None),
        request_id=m.request_id, reason=m.reason, waiting_applications=tuple(m.waiting_applications),
    )


def node_pb(n: NodeRecord) -> pb.Node:
    return pb.Node(node_id=n.node_id, capacity=resources_pb(n.capacity),
                   batch_allocatable=resources_pb(n.batch_allocatable),
                   lifecycle=LIFECYCLE_TO_PB[n.lifecycle], drain=drain_pb(n.drain),
                   highest_scheduler_epoch=n.highest_epoch, acked_epoch=n.acked_epoch,
                   acked_revision=n.acked_revision, revision=n.revision)


def node_from(m: pb.Node) -> NodeRecord:
    return NodeRecord(m.node_id, resources_from(m.capacity), resources_from(m.batch_allocatable),
                      LIFECYCLE_FROM_PB.get(m.lifecycle, Lifecycle.RECOVERING), drain_from(m.drain),
                      m.highest_scheduler_epoch, m.acked_epoch, m.acked_revision, m.revision)


def application_pb(a: Application) -> pb.Application:
    return pb.Application(application_id=a.application_id, source=SOURCE_TO_PB[a.source],
                          created_unix_ms=ms(a.created_at), revision=a.revision)


def application_from(m: pb.Application) -> Application:
    return Application(m.application_id, SOURCE_FROM_PB.get(m.source, Source.LOCAL), sec(m.created_unix_ms),
                       m.revision)


def allocation_pb(a: Allocation) -> pb.Allocation:
    return pb.Allocation(
        key=a.key, application_id=a.application_id, source=SOURCE_TO_PB[a.source],
        resources=resources_pb(a.resources), phase=PHASE_TO_PB[a.phase], priority=a.priority, cgroup=a.cgroup,
        name=a.name, namespace=a.namespace, created_unix_ms=ms(a.created_at),
        started_unix_ms=ms(a.started_at), scheduler_epoch=a.scheduler_epoch, request_id=a.request_id,
        tags=tags_pb(a.tags), revision=a.revision,
    )


def allocation_from(m: pb.Allocation) -> Allocation:
    return Allocation(
        key=m.key, application_id=m.application_id, source=SOURCE_FROM_PB.get(m.source, Source.LOCAL),
        resources=resources_from(m.resources), phase=PHASE_FROM_PB.get(m.phase, Phase.RUNNING),
        priority=m.priority, cgroup=m.cgroup, name=m.name, namespace=m.namespace,
        created_at=sec(m.created_unix_ms), started_at=sec(m.started_unix_ms),
        scheduler_epoch=m.scheduler_epoch, request_id=m.request_id, tags=tags_from(m.tags),
        revision=m.revision,
    )


def notice_pb(n: Notice) -> pb.Notice:
    return pb.Notice(kind=n.kind, message=n.message, fields=tags_pb(n.fields), at_unix_ms=ms(n.at))


def notice_from(m: pb.Notice) -> Notice:
    return Notice(m.kind, m.message, tags_from(m.fields), sec(m.at_unix_ms))


def admit_request_from(m: pb.AllocationSpec) -> AdmitRequest:
    """The request as the ledger takes it; enum and presence errors name the field."""
    if m.source not in SOURCE_FROM_PB:
        raise InvalidRequest("allocation.source", "must be SOURCE_K8S, SOURCE_YARN or SOURCE_LOCAL")
    if not m.key:
        raise InvalidRequest("allocation.key", "required")
    if not m.application_id:
        raise InvalidRequest("allocation.application_id", "required")
    return AdmitRequest(
        key=m.key, application_id=m.application_id, source=SOURCE_FROM_PB[m.source],
        resources=resources_from(m.resources), priority=m.priority, request_id=m.request_id, name=m.name,
        namespace=m.namespace, tags=tags_from(m.tags),
    )


def allocation_spec_pb(r: AdmitRequest) -> pb.AllocationSpec:
    return pb.AllocationSpec(key=r.key, application_id=r.application_id, source=SOURCE_TO_PB[r.source],
                             resources=resources_pb(r.resources), priority=r.priority,
                             request_id=r.request_id, name=r.name, namespace=r.namespace,
                             tags=tags_pb(r.tags))


def setting_value(value: object) -> str:
    """A setting as written in the config: 65.0 -> "65", 0.5 -> "0.5", "cpuset" -> "cpuset"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_pb(policies: PolicyConfig, sources: Mapping[str, str]) -> list[pb.SettingSource]:
    """Each `section.name` of `sources` with its value in `policies` and its source, by name."""
    out = []
    for name in sorted(sources):
        section, _, field = name.partition(".")
        value = getattr(getattr(policies, section, None), field, None)
        out.append(pb.SettingSource(name=name, source=sources[name],
                                    value="" if value is None else setting_value(value)))
    return out


def limits_pb(held: HeldLimits) -> list[pb.WorkloadLimits]:
    """Each pod's limits in place (batch limits, memory QoS, CPU burst) and their sources, by pod name; the
    pod's cgroup first, then its containers' in the order the executors hold them."""
    rows: dict[str, pb.WorkloadLimits] = {}
    cgroups: dict[str, dict[str, pb.CgroupLimits]] = {}

    def cgroup(pod: str, rel: str, level: str) -> pb.CgroupLimits:
        mine = cgroups.setdefault(pod, {})
        if rel not in mine:
            mine[rel] = pb.CgroupLimits(level=level, cgroup=rel, memory_high_bytes=-1)
        return mine[rel]

    def row(pod: str) -> pb.WorkloadLimits:
        return rows.setdefault(pod, pb.WorkloadLimits(pod=pod))

    for key, e in held.batch.items():
        r = row(e.name)
        r.key, r.batch_source = key, e.source
        for level, lim in (("pod", e.pod), *(("container", c) for c in e.containers)):
            c = cgroup(e.name, lim.rel, level)
            c.has_batch, c.cpu_shares = True, lim.cpu_shares
            c.cfs_quota_us = -1 if lim.cfs_quota_us is None else lim.cfs_quota_us
            c.memory_limit_bytes = -1 if lim.memory_limit_bytes is None else lim.memory_limit_bytes
    for name, values in held.memory.items():
        row(name).memory_qos_source = held.memory_source
        for v in values:
            c = cgroup(name, v.rel, "container" if v.sets_high else "pod")
            c.has_memory_qos, c.memory_min_bytes, c.memory_low_bytes = True, v.min_bytes, v.low_bytes
            c.memory_high_bytes = -1 if v.high_bytes is None else v.high_bytes
    for name, bursts in held.burst.items():
        row(name).cpu_burst_source = held.burst_source
        for level, rel, burst in bursts:
            c = cgroup(name, rel, level)
            c.has_cpu_burst, c.cpu_burst_us = True, burst
    for name, r in rows.items():
        r.cgroups.extend(sorted(cgroups.get(name, {}).values(), key=lambda c: (c.level != "pod", c.cgroup)))
    return [rows[name] for name in sorted(rows)]


def disks_pb(io: IoSample | None, workloads: tuple[Workload, ...], top: int = 5) -> list[pb.DiskStatus]:
    """The disk guard's last reading as `status` shows it (nothing while the guard does not run)."""
    if io is None:
        return []
    names = {w.key: w for w in workloads}
    busy = sorted(io.by_workload.items(), key=lambda kv: (-kv[1].bps, kv[0]))[:top]
    users = [pb.WorkloadIo(key=k, name=names[k].name if k in names else k, be=k in names and names[k].be,
                           bytes_per_s=r.bps, ios_per_s=r.iops) for k, r in busy if r.bps > 0 or r.iops > 0]
    out = []
    for d in io.disks:
        st = pb.DiskStatus(device=d.dev, has_rates=d.hp is not None and d.be is not None,
                           hp_idle_s=-1.0 if d.hp_idle_s is None else d.hp_idle_s,
                           hp_io_stall_percent=-1.0 if io.hp_stall_percent is None else io.hp_stall_percent,
                           top=users)
        if d.hp is not None and d.be is not None:
            st.hp_read_bytes_per_s, st.hp_write_bytes_per_s, st.hp_ios_per_s = d.hp.rbps, d.hp.wbps, d.hp.iops
            st.be_read_bytes_per_s, st.be_write_bytes_per_s, st.be_ios_per_s = d.be.rbps, d.be.wbps, d.be.iops
        cap = d.cap.values() if d.cap is not None else (None, None, None, None)
        (st.cap_read_bytes_per_s, st.cap_write_bytes_per_s, st.cap_read_ios_per_s,
         st.cap_write_ios_per_s) = (-1 if v is None else v for v in cap)
        out.append(st)
    return out
