"""The overcommitted node of the Kubernetes end-to-end tests: three BE pods and three YARN containers, as the
kubelet and the NodeManager report them (built from the checked-in payloads)."""

from __future__ import annotations

from typing import Any

from kit.payload import batch_pod, nm_container, nm_containers, podlist

TS = 1700000000000
C1, C2, C3 = (f"container_e17_{TS}_0001_01_00000{i}" for i in (1, 2, 3))
# name -> (priority, batch-cpu milli, n: the uid and start time)
PODS = {"free-pod": (3500, "1000", 1), "batch-a": (5500, "2000", 2), "batch-b": (5500, "3000", 3)}
CORES = {C1: 1, C2: 2, C3: 2}


def pods(names: list[str]) -> dict[str, Any]:
    """The kubelet's PodList of the pods `names` (of PODS), BE pods asking for batch resources."""
    return podlist([batch_pod(name, f"0a1b2c3d-0000-4000-8000-0000000000c{n}", cpu=cpu, priority=prio,
                              started=f"2024-05-01T10:00:0{n}Z")
                    for name, (prio, cpu, n) in ((name, PODS[name]) for name in names)])


def containers(ids: list[str]) -> dict[str, Any]:
    """The NodeManager's containers `ids` (of C1, C2, C3), 1 GiB each."""
    return nm_containers([nm_container(c, vcores=CORES[c], mib=1024) for c in ids])
