"""The recovered cluster as YuniKorn scheduler-interface (si.proto v1.8.0) messages, in replay order.

Each message is `{"<si message name>": <its protobuf JSON mapping>}`: RegisterResourceManagerRequest, nodes
registered unschedulable (CREATE_DRAIN), applications (force-created, so a changed queue config cannot reject
running work), the allocations with `nodeID` set, then DRAIN_TO_SCHEDULABLE (DRAIN_NODE while
decommissioning). The consumer is a shim acting as the resource manager: yunikorn-core has no network API.
The field-by-field mapping and its sources are in docs/yunikorn.md.
"""

from __future__ import annotations

import json
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


@dataclass
class _Builder:
    rm_id: str
    partition: str
    queue: str
    out: SiOutput = field(default_factory=SiOutput)
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)
    originators: set[str] = field(default_factory=set)

    def allocation(self, nc: NodeCache, a: Allocation) -> dict[str, Any] | None:
        key = allocation_key(a)
        if a.resources.milli_cpu <= 0 and a.resources.memory_bytes <= 0:
            self.out.notes.append(f"{a.key}: skipped on node {nc.node_id}: {a.resources.milli_cpu} "
                                  f"milli-CPU, {a.resources.memory_bytes} bytes (yunikorn-core rejects it: "
                                  "allocation contains no resources)")
            return None
        tags = pod_tags(a)
        tags[CREATION_TIME] = _creation_time(a)
        body: dict[str, Any] = {"allocationKey": key, "allocationTags": tags,
                                "resourcePerAlloc": _resource(a.resources), "nodeID": nc.node_id}
        if a.priority:
            body["priority"] = a.priority
        if not placed_by_scheduler(a):
            tags[FOREIGN] = "default"
            return body
        body["applicationID"] = a.application_id
        self._application(a, tags)
        return body

    def _application(self, a: Allocation, tags: dict[str, str]) -> None:
        if a.application_id in self.apps:
            return
        user = user_of(tags)
        if user.problem:
            self.out.notes.append(f"{a.key}: application {a.application_id}: {user.problem}; "
                                  f"using {user.name}")
        ugi: dict[str, Any] = {"user": user.name}
        if user.groups:
            ugi["groups"] = list(user.groups)
        app_tags = {"application.create.force": "true"}
        if a.source is Source.K8S and a.namespace:
            app_tags["namespace"] = a.namespace
        self.apps[a.application_id] = {"applicationID": a.application_id,
                                       "queueName": queue_of(tags, self.queue),
                                       "partitionName": self.partition, "ugi": ugi, "tags": app_tags}

    def mark_originators(self, bodies: list[tuple[Allocation, dict[str, Any]]]) -> None:
        """One originator per application: its YARN ApplicationMaster, else (a pod application) its oldest
        allocation, as the k8shim marks the application's first real pod."""
        chosen: dict[str, tuple[tuple[int, float, str], dict[str, Any]]] = {}
        for a, body in bodies:
            if "applicationID" not in body:
                continue
            rank = (0 if is_yarn_am(a) else 1 if a.source is not Source.YARN else 2,
                    float(body["allocationTags"][CREATION_TIME]), a.key)
            if rank[0] == 2:
                continue  # a YARN worker never owns its application
            cur = chosen.get(a.application_id)
            if cur is None or rank < cur[0]:
                chosen[a.application_id] = (rank, body)
        for _, body in chosen.values():
            body["originator"] = True


def si_messages(cluster: Cluster, rm_id: str, *, version: str = "", policy_group: str = "queues",
                partition: str = "default", queue: str = "root.default") -> SiOutput:
    """The si messages that replay `cluster` into a YuniKorn core under `rm_id` (see the module doc)."""
    b = _Builder(rm_id, partition, queue)
    recovered = sorted((n for n in cluster.nodes.values() if n.state is NodeState.RECOVERED and n.node),
                       key=lambda n: n.node_id)
    create, schedulable = [], []
    bodies: list[tuple[Allocation, dict[str, Any]]] = []
    for nc in recovered:
        assert nc.node is not None
        create.append({"nodeID": nc.node_id, "action": "CREATE_DRAIN",
                       "attributes": {"si.io/hostname": nc.node_id, "si.io/rackname": "/rack-default"},
                       "schedulableResource": _resource(nc.node.batch_allocatable)})
        for a in sorted(nc.allocations.values(), key=lambda a: a.key):
            if cluster.owner.get(a.key) != nc.address:
                continue
            body = b.allocation(nc, a)
            if body is not None:
                bodies.append((a, body))
        draining = nc.node.lifecycle in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED)
        action = "DRAIN_NODE" if draining else "DRAIN_TO_SCHEDULABLE"
        schedulable.append({"nodeID": nc.node_id, "action": action})
    b.mark_originators(bodies)
    register: dict[str, Any] = {"rmID": rm_id, "version": version, "policyGroup": policy_group}
    if version:
        register["buildInfo"] = {"buildVersion": version}
    b.out.messages = [
        {"RegisterResourceManagerRequest": register},
        {"NodeRequest": {"rmID": rm_id, "nodes": create}},
        {"ApplicationRequest": {"rmID": rm_id, "new": [b.apps[k] for k in sorted(b.apps)]}},
        {"AllocationRequest": {"rmID": rm_id, "allocations": [body for _, body in bodies]}},
        {"NodeRequest": {"rmID": rm_id, "nodes": schedulable}},
    ]
    return b.out
