"""The recovered cluster as YuniKorn scheduler-interface requests (si.proto, JSON mapping of protobuf).

Order is the one yunikorn-core needs: nodes registered unschedulable (CREATE_DRAIN), then applications
(with `application.create.force` so a changed queue config cannot reject running work), then allocations
with `nodeID` set (existing allocations, force-added), then DRAIN_TO_SCHEDULABLE for nodes whose
allocations were all applied and that are schedulable on the agent (DRAIN_NODE while decommissioning).
Resources use the SI names `vcore` (milli-CPU) and `memory` (bytes); int64 values are JSON strings, as
the protobuf JSON mapping prints them.
"""

from __future__ import annotations

from typing import Any

from agent.recovery.cluster import Cluster, NodeState
from agent.state.records import Lifecycle
from qos.model import Resources


def _resource(r: Resources) -> dict[str, Any]:
    return {"resources": {"vcore": {"value": str(r.milli_cpu)}, "memory": {"value": str(r.memory_bytes)}}}


def si_requests(cluster: Cluster, rm_id: str, partition: str = "default",
                queue: str = "root.default") -> dict[str, Any]:
    recovered = sorted((n for n in cluster.nodes.values() if n.state is NodeState.RECOVERED and n.node),
                       key=lambda n: n.node_id)
    create = []
    schedulable = []
    apps: dict[str, dict[str, Any]] = {}
    allocations = []
    for nc in recovered:
        assert nc.node is not None
        create.append({"nodeID": nc.node_id, "action": "CREATE_DRAIN",
                       "attributes": {"si/hostname": nc.node_id, "si/node-partition": partition},
                       "schedulableResource": _resource(nc.node.batch_allocatable)})
        for app in sorted(nc.applications.values(), key=lambda a: a.application_id):
            apps.setdefault(app.application_id, {
                "applicationID": app.application_id, "queueName": queue, "partitionName": partition,
                "ugi": {"user": "coloc"},
                "tags": {"application.create.force": "true", "coloc/source": app.source.value},
            })
        for a in sorted(nc.allocations.values(), key=lambda a: a.key):
            if cluster.owner.get(a.key) != nc.address:
                continue
            allocations.append({
                "allocationKey": a.key, "applicationID": a.application_id, "nodeID": nc.node_id,
                "partitionName": partition, "resourcePerAlloc": _resource(a.resources),
                "priority": a.priority,
                "allocationTags": {"coloc/phase": a.phase.value, "coloc/source": a.source.value,
                                   "creationTime": str(int(a.created_at))},
            })
        # Recovered means acknowledged: the agent is SCHEDULABLE unless a drain holds it.
        draining = nc.node.lifecycle in (Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED)
        action = "DRAIN_NODE" if draining else "DRAIN_TO_SCHEDULABLE"
        schedulable.append({"nodeID": nc.node_id, "action": action})
    return {
        "rmID": rm_id,
        "requests": [
            {"NodeRequest": {"rmID": rm_id, "nodes": create}},
            {"ApplicationRequest": {"rmID": rm_id, "new": list(apps.values())}},
            {"AllocationRequest": {"rmID": rm_id, "allocations": allocations}},
            {"NodeRequest": {"rmID": rm_id, "nodes": schedulable}},
        ],
    }
