"""Payloads in the real formats, built from the checked-in fixtures: kubelet PodLists (large ones too, for the
payload tests) and the NodeManager's containers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_pod(name: str = "web-7d9f8c-x2x9z") -> dict[str, object]:
    mixed = json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text())
    pod: dict[str, object] = next(p for p in mixed["items"] if p["metadata"]["name"] == name)
    return pod


def pod_copies(n: int, template: dict[str, object] | None = None, start: int = 0) -> list[dict[str, object]]:
    """`n` copies of a fixture pod, each with its own name and UID (all valid)."""
    template = template or fixture_pod()
    out = []
    for i in range(start, start + n):
        p = copy.deepcopy(template)
        meta = p["metadata"]
        assert isinstance(meta, dict)
        meta.update(name=f"copy-{i}", uid=f"5e6f7a8b-0000-4000-8000-{i:012d}")
        out.append(p)
    return out


def podlist_body(items: list[dict[str, object]], min_bytes: int = 0) -> bytes:
    """A v1 PodList of `items`, padded with copies of the fixture's HP pod to at least `min_bytes`."""
    pods = list(items)
    body = json.dumps(podlist(pods)).encode()
    added = 0
    while len(body) < min_bytes:
        one = len(json.dumps(pod_copies(1, start=added)[0])) + 2
        n = (min_bytes - len(body)) // one + 1
        pods += pod_copies(n, start=added)
        added += n
        body = json.dumps(podlist(pods)).encode()
    return body


def batch_pod(name: str, uid: str, *, cpu: str | None = "2000", memory: str = "1Gi",
              priority: int | None = None, started: str | None = None) -> dict[str, Any]:
    """The fixture's BE pod (`spark-exec-1`) as `name`/`uid`, requesting (and limited to) `cpu` milli-cores
    of `kubernetes.io/batch-cpu` and `memory` of batch memory (nothing at all when `cpu` is None)."""
    p: dict[str, Any] = copy.deepcopy(fixture_pod("spark-exec-1"))
    p["metadata"].update(name=name, uid=uid)
    if priority is not None:
        p["spec"]["priority"] = priority
    res = p["spec"]["containers"][0]["resources"]
    requests = {} if cpu is None else {"kubernetes.io/batch-cpu": cpu, "kubernetes.io/batch-memory": memory}
    res["requests"], res["limits"] = requests, dict(requests)
    if started is not None:
        p["status"]["startTime"] = started
    return p


def podlist(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A kubelet `/pods` answer (v1 PodList) of `items`."""
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


def nm_container(cid: str, *, vcores: int, mib: int, node: str = "node-a", **fields: Any) -> dict[str, Any]:
    """One RUNNING container as the NodeManager's `/ws/v1/node/containers` lists it; `fields` override."""
    return {"id": cid, "state": "RUNNING", "exitCode": -1000, "diagnostics": "", "user": "hadoop",
            "totalMemoryNeededMB": mib, "totalVCoresNeeded": vcores, "nodeId": f"{node}:45454",
            "containerLogsLink": f"http://{node}:8042/node/containerlogs/{cid}/hadoop",
            "executionType": "GUARANTEED", "containerLogFiles": [], **fields}


def nm_containers(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The NodeManager's `/ws/v1/node/containers` answer of `items`."""
    return {"containers": {"container": items}}
