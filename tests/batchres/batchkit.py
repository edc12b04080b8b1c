"""Pieces of the batch-limits tests: a BE pod in the kubelet's exact v1 PodList format (taken from the
checked-in fixture and given the issue's batch resources), the chain kubelet → plan → writer wired on a real
cgroup root, and a poll with a deadline."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from agent.config.sources import KubeletConfig
from agent.daemon.batch_limits import BatchLimitsController
from agent.executors.batch_limits import BatchLimitsExecutor
from agent.sources.kubelet import KubeletSource
from cgroups.layout import Layout
from cgroups.writer import CgroupWriter

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "kubelet" / "podlist-mixed.json"
NM_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nodemanager" / "3.x"
BIG = "container_e17_1700000000000_0001_01_000002"  # 256 MiB, 2 vcores in nm_fixture's answers
SMALL = "container_e17_1700000000000_0001_01_000003"  # 128 MiB, 1 vcore
UID = "0a1b2c3d-0000-4000-8000-0000000000b1"
CID = "b1" * 32
POD = f"besteffort/pod{UID}"
CONTAINER = f"{POD}/{CID}"
MI = 1 << 20


def be_pod(uid: str = UID, cid: str = CID, *, cpu: tuple[str, str] = ("500", "1000"),
           memory: tuple[str, str] = ("256Mi", "512Mi"), annotations: dict[str, str] | None = None,
           name: str = "batch-job") -> dict[str, Any]:
    """The fixture's spark executor (a koord BE pod as the kubelet lists it) with new identity and amounts."""
    doc = json.loads(FIXTURE.read_text())
    item = copy.deepcopy(next(i for i in doc["items"] if i["metadata"]["name"] == "spark-exec-1"))
    item["metadata"].update(name=name, uid=uid)
    if annotations is not None:
        item["metadata"]["annotations"] = annotations
    item["spec"]["containers"][0]["resources"] = {
        "requests": {"kubernetes.io/batch-cpu": cpu[0], "kubernetes.io/batch-memory": memory[0]},
        "limits": {"kubernetes.io/batch-cpu": cpu[1], "kubernetes.io/batch-memory": memory[1]}}
    item["status"]["containerStatuses"][0]["containerID"] = f"containerd://{cid}"
    return dict(item)


def pod_list(*items: dict[str, Any]) -> dict[str, Any]:
    """A PodList with the fixture's other pods (HP, protected) and these BE pods."""
    doc = json.loads(FIXTURE.read_text())
    doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] != "spark-exec-1"] + list(items)
    return dict(doc)


def write_list(path: Path, *items: dict[str, Any]) -> Path:
    path.write_text(json.dumps(pod_list(*items)))
    return path


def controller(url: str, writer: CgroupWriter, *, resync_s: float = 30.0, watch: bool = True,
               layout: Layout | None = None) -> tuple[BatchLimitsController, KubeletSource]:
    layout = layout or Layout("cgroupfs")
    cfg = KubeletConfig(url=url, token_file="", timeout_s=2.0, resync_s=60.0, stale_after_s=120.0,
                        min_resync_gap_s=0.05)
    kubelet = KubeletSource(cfg, layout)
    ctl = BatchLimitsController(kubelet, BatchLimitsExecutor(writer), layout,
                                lambda rel: writer.path("cpu", rel), resync_s=resync_s, watch=watch)
    return ctl, kubelet


def read(path: Path) -> str:
    return path.read_text().strip()


def nm_fixture(tmp_path: Path) -> Path:
    """The NodeManager fixture's answers with two RUNNING containers: BIG (256 MiB, 2 vcores) and SMALL
    (128 MiB, 1 vcore)."""
    d = tmp_path / "nm"
    shutil.copytree(NM_FIXTURES, d)
    doc = json.loads((d / "containers.json").read_text())
    items = [c for c in doc["containers"]["container"] if c["id"] in (BIG, SMALL)]
    for c, (mb, vcores) in zip(items, ((256, 2), (128, 1)), strict=True):
        c.update(state="RUNNING", totalMemoryNeededMB=mb, totalVCoresNeeded=vcores)
    doc["containers"]["container"] = items
    (d / "containers.json").write_text(json.dumps(doc))
    return d
