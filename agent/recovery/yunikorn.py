"""The recovered cluster as YuniKorn scheduler-interface (si.proto v1.8.0) messages, in replay order.

Each message is `{"<si message name>": <its protobuf JSON mapping>}`: RegisterResourceManagerRequest, nodes
registered unschedulable (CREATE_DRAIN), applications (force-created, so a changed queue config cannot reject
running work), the allocations with `nodeID` set, then DRAIN_TO_SCHEDULABLE (DRAIN_NODE while
decommissioning). The consumer is a shim acting as the resource manager: yunikorn-core has no network API.
The field-by-field mapping and its sources are in docs/yunikorn.md.

`si_stream` yields the messages one at a time, each holding at most `batch` nodes, applications or
allocations, so what it holds besides the cluster is one message and a line per application (its queue,
user and originator), not a copy of every allocation. `si_messages` collects the stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agent.recovery.cluster import Cluster, NodeCache, NodeState
from agent.recovery.yunikorn_facts import (
    allocation_key,
    is_yarn_am,
    placed_by_scheduler,
    pod_tags,
    queue_of,
    user_of,
)
from agent.state.records import Allocation, Lifecycle
from qos.model import Resources, Source

FOREIGN = "foreign"  # si common.Foreign; value "default" (a mirror pod would be "static")
CREATION_TIME = "creationTime"
BATCH = 1000  # nodes, applications or allocations per message


@dataclass
class SiOutput:
    """The messages to print, and one line per allocation left out or fact replaced (for stderr)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [json.dumps(m, separators=(",", ":"), sort_keys=False) for m in self.messages]


def _resource(r: Resources) -> dict[str, Any]:
    """`vcore` in milli-CPU and `memory` in bytes, as the k8shim maps `cpu` and `memory`."""
    return {"resources": {"vcore": {"value": str(r.milli_cpu)}, "memory": {"value": str(r.memory_bytes)}}}


def _creation_time(a: Allocation) -> str:
    """Unix seconds: admission for an admitted allocation, the source's start time for an adopted one."""
    times = [t for t in (a.created_at, a.started_at) if t > 0]
    return str(int(min(times))) if times else "0"


def _node_create(nc: NodeCache) -> dict[str, Any]:
    assert nc.node is not None
    return {"nodeID": nc.node_id, "action": "CREATE_DRAIN",
            "attributes": {"si.io/hostname": nc.node_id, "si.io/rackname": "/rack-default"},
            "schedulableResource": _resource(nc.node.batch_allocatable)}


def _node_schedulable(nc: NodeCache) -> dict[str, Any]:
    assert nc.node is not None
    draining = nc.node.lifecycle in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED)
    return {"nodeID": nc.node_id, "action": "DRAIN_NODE" if draining else "DRAIN_TO_SCHEDULABLE"}


def _has_resources(a: Allocation) -> bool:
    return a.resources.milli_cpu > 0 or a.resources.memory_bytes > 0


@dataclass
class _Builder:
    partition: str
    queue: str
    note: Callable[[str], None]
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)
    # application id -> (rank, allocation key) of its originator so far
    originators: dict[str, tuple[tuple[int, float, str], str]] = field(default_factory=dict)

    def survey(self, nc: NodeCache, a: Allocation) -> None:
        """First pass, in replay order: the application an allocation brings, its originator, the notes."""
        if not _has_resources(a):
            self.note(f"{a.key}: skipped on node {nc.node_id}: {a.resources.milli_cpu} milli-CPU, "
                      f"{a.resources.memory_bytes} bytes (yunikorn-core rejects it: allocation contains no "
                      "resources)")
            return
        if not placed_by_scheduler(a):
            return
        tags = pod_tags(a)
        if a.application_id not in self.apps:
            self._application(a, tags)
        # One originator per application: its YARN ApplicationMaster, else (a pod application) its oldest
        # allocation, as the k8shim marks the application's first real pod. A YARN worker never owns it.
        kind = 0 if is_yarn_am(a) else 1 if a.source is not Source.YARN else 2
        if kind == 2:
            return
        rank = (kind, float(_creation_time(a)), a.key)
        cur = self.originators.get(a.application_id)
        if cur is None or rank < cur[0]:
            self.originators[a.application_id] = (rank, a.key)

    def _application(self, a: Allocation, tags: dict[str, str]) -> None:
        user = user_of(tags)
        if user.problem:
            self.note(f"{a.key}: application {a.application_id}: {user.problem}; using {user.name}")
        ugi: dict[str, Any] = {"user": user.name}
        if user.groups:
            ugi["groups"] = list(user.groups)
        app_tags = {"application.create.force": "true"}
        if a.source is Source.K8S and a.namespace:
            app_tags["namespace"] = a.namespace
        self.apps[a.application_id] = {"applicationID": a.application_id,
                                       "queueName": queue_of(tags, self.queue),
                                       "partitionName": self.partition, "ugi": ugi, "tags": app_tags}

    def allocation(self, nc: NodeCache, a: Allocation) -> dict[str, Any] | None:
        """Second pass: the allocation's message body (None when the first pass left it out)."""
        if not _has_resources(a):
            return None
        tags = pod_tags(a)
        tags[CREATION_TIME] = _creation_time(a)
        body: dict[str, Any] = {"allocationKey": allocation_key(a), "allocationTags": tags,
                                "resourcePerAlloc": _resource(a.resources), "nodeID": nc.node_id}
        if a.priority:
            body["priority"] = a.priority
        if not placed_by_scheduler(a):
            tags[FOREIGN] = "default"
            return body
        body["applicationID"] = a.application_id
        chosen = self.originators.get(a.application_id)
        if chosen is not None and chosen[1] == a.key:
            body["originator"] = True
        return body


def _owned(cluster: Cluster, nc: NodeCache) -> list[Allocation]:
    """The node's allocations that count on it (each key once in the cluster), by key."""
    return [a for k, a in sorted(nc.allocations.items()) if cluster.owner.get(k) == nc.address]


def _batches(rm_id: str, name: str, field_name: str, items: Iterator[dict[str, Any]],
             batch: int) -> Iterator[dict[str, Any]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == batch:
            yield {name: {"rmID": rm_id, field_name: chunk}}
            chunk = []
    if chunk:
        yield {name: {"rmID": rm_id, field_name: chunk}}


def si_stream(cluster: Cluster, rm_id: str, *, version: str = "", policy_group: str = "queues",
              partition: str = "default", queue: str = "root.default", batch: int = BATCH,
              on_note: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """The si messages that replay `cluster` into a YuniKorn core under `rm_id` (see the module doc), one
    at a time; `on_note` hears of each allocation left out or fact replaced, in replay order."""
    if batch < 1:
        raise ValueError(f"batch: must be ≥ 1, got {batch}")
    b = _Builder(partition, queue, on_note or (lambda _: None))
    recovered = sorted((n for n in cluster.nodes.values() if n.state is NodeState.RECOVERED and n.node),
                       key=lambda n: n.node_id)
    register: dict[str, Any] = {"rmID": rm_id, "version": version, "policyGroup": policy_group}
    if version:
        register["buildInfo"] = {"buildVersion": version}
    yield {"RegisterResourceManagerRequest": register}
    yield from _batches(rm_id, "NodeRequest", "nodes", (_node_create(nc) for nc in recovered), batch)
    for nc in recovered:
        for a in _owned(cluster, nc):
            b.survey(nc, a)
    yield from _batches(rm_id, "ApplicationRequest", "new", (b.apps[k] for k in sorted(b.apps)), batch)
    bodies = (body for nc in recovered for a in _owned(cluster, nc)
              if (body := b.allocation(nc, a)) is not None)
    yield from _batches(rm_id, "AllocationRequest", "allocations", bodies, batch)
    yield from _batches(rm_id, "NodeRequest", "nodes", (_node_schedulable(nc) for nc in recovered), batch)


def si_messages(cluster: Cluster, rm_id: str, *, version: str = "", policy_group: str = "queues",
                partition: str = "default", queue: str = "root.default", batch: int = BATCH) -> SiOutput:
    """`si_stream` collected: every message and note in memory (for tests and small clusters)."""
    out = SiOutput()
    out.messages = list(si_stream(cluster, rm_id, version=version, policy_group=policy_group,
                                  partition=partition, queue=queue, batch=batch, on_note=out.notes.append))
    return out
