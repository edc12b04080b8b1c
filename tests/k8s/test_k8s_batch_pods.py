"""The kubelet source hands each BE pod's per-container batch resources to the batch limits
(qos/batch_limits.py): from the checked-in PodList in the kubelet's exact format."""

from __future__ import annotations

import json
from pathlib import Path

from agent.sources.kubelet import parse_pod_list
from cgroups.layout import Layout
from qos.batch_limits import BatchAmounts, BatchContainer, Limits, pod_limits

GI = 1 << 30


def _pods(doc: object, driver: str = "cgroupfs") -> dict[str, object]:
    pods, rejected = parse_pod_list(doc, Layout(driver))
    assert not rejected
    return {p.info.name: p.info.batch for p in pods}


def test_be_pods_carry_their_containers_batch_resources_and_cgroups(fixtures: Path) -> None:
    doc = json.loads((fixtures / "kubelet" / "podlist-mixed.json").read_text())
    batch = _pods(doc)
    spark = batch["spark-exec-1"]
    assert spark is not None
    pod = "besteffort/pod0a1b2c3d-0000-4000-8000-000000000001"
    cid = "4c5f3e2d1b0a99887766554433221100aabbccddeeff00112233445566778899"
    assert spark.cgroup == pod and spark.key == "k8s/0a1b2c3d-0000-4000-8000-000000000001"
    amounts = BatchAmounts(2000, 2000, 4 * GI)
    assert spark.containers == (BatchContainer("executor", f"{pod}/{cid}", amounts),)
    assert pod_limits(spark).pod == Limits(pod, 2048, 200_000, 4 * GI)
    # not labelled BE (a plain BestEffort job, an LSR pod, HP pods, the protected kube-proxy): not ours
    for name in ("web-7d9f8c-x2x9z", "redis-0", "report-28571234-abcde", "scratch", "kube-proxy-node-a"):
        assert batch.get(name) is None, name
    assert "web-7d9f8c-x2x9z" in batch and "kube-proxy-node-a" in batch


def test_systemd_names_and_the_annotation_travel_with_the_pod(fixtures: Path) -> None:
    doc = json.loads((fixtures / "kubelet" / "podlist-mixed.json").read_text())
    item = next(i for i in doc["items"] if i["metadata"]["name"] == "etl-job-5xk2p")
    item["spec"]["containers"][0]["resources"] = {}
    item["metadata"].setdefault("annotations", {})["node.koordinator.sh/extended-resource-spec"] = json.dumps(
        {"containers": {"etl": {"limits": {"kubernetes.io/batch-cpu": "1500"}}}})
    etl = _pods(doc, "systemd")["etl-job-5xk2p"]
    assert etl is not None and etl.containers[0].spec is None
    assert etl.containers[0].cgroup is not None and etl.containers[0].cgroup.endswith(".scope")
    assert etl.cgroup.startswith("kubepods-besteffort.slice/kubepods-besteffort-pod")
    plan = pod_limits(etl)
    assert plan.source == "annotation" and plan.pod is not None and plan.pod.cfs_quota_us == 150_000
