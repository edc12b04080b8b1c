"""The overcommitted node of the Kubernetes end-to-end tests: three BE pods and three YARN containers, as the
kubelet and the NodeManager report them (built from the checked-in payloads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.payload import FIX, batch_pod, nm_container, nm_containers, podlist
from kit.realcg import RealRoot

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


def overcommitted_node(real_root: RealRoot, tmp_path: Path) -> tuple[Path, Path, dict[tuple[str, str], str]]:
    """The node laid out: the three YARN containers' cgroups with a process each, the kubelet's PodList of
    PODS and the NodeManager's answers with C1..C3 written under `tmp_path`; (podlist file, NodeManager dir,
    each pod's (namespace, name) -> uid)."""
    for c in (C1, C2, C3):
        real_root.spawn(real_root.mkcg(f"besteffort/hadoop-yarn/{c}"), ["sleep", "300"])
    podlist_file, nm_dir = tmp_path / "pods.json", tmp_path / "nm"
    nm_dir.mkdir()
    podlist_file.write_text(json.dumps(pods(list(PODS))))
    for name in ("info.json", "apps.json"):
        (nm_dir / name).write_bytes((FIX / "nodemanager" / "3.x" / name).read_bytes())
    (nm_dir / "containers.json").write_text(json.dumps(containers([C1, C2, C3])))
    known = {("batch", n): f"0a1b2c3d-0000-4000-8000-0000000000c{v[2]}" for n, v in PODS.items()}
    return podlist_file, nm_dir, known
