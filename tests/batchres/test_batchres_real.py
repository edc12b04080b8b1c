"""BE pods' batch limits on real cgroups (v1 here), put in place when the pod cgroup is made.

The kubelet is a local HTTP server answering `GET /pods` with a PodList in its exact format (no kubelet runs
here); the pod and container cgroups are made as the kubelet and the runtime make them (mkdir); the agent's
chain (inotify → kubelet list → qos.batch_limits → CgroupWriter) is the real one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from batchkit import CONTAINER, MI, POD, UID, be_pod, controller, read, write_list
from kit.fakes.kubelet import FakeKubelet
from kit.poll import until
from kit.realcg import RealRoot
from prometheus_client import CollectorRegistry

from agent.daemon.batch_limits import BatchLimitsMetrics
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.cgroups]


def _v1(real_root: RealRoot) -> None:
    if real_root.hierarchy.mode == "v2":
        pytest.skip("v1 files; tests/batchres/test_batchres_guest.py covers v2")


def _limits(real_root: RealRoot, rel: str) -> tuple[int, int, int, int]:
    cpu, mem = real_root.path("cpu", rel), real_root.path("memory", rel)
    return (int(read(cpu / "cpu.shares")), int(read(cpu / "cpu.cfs_quota_us")),
            int(read(cpu / "cpu.cfs_period_us")), int(read(mem / "memory.limit_in_bytes")))


def _stat(real_root: RealRoot, ctrl: str, rel: str, name: str) -> dict[str, int]:
    lines = read(real_root.path(ctrl, rel) / name).splitlines()
    return {k: int(v) for k, v in (line.split() for line in lines)}


UNLIMITED_V1 = 0x7FFFFFFFFFFFF000  # memory.limit_in_bytes with no limit (LONG_MAX rounded to a page)


def _kubelet_be(real_root: RealRoot, rel: str) -> None:
    """What the kubelet writes for a BestEffort pod at creation: shares 2."""
    (real_root.path("cpu", rel) / "cpu.shares").write_text("2")


async def test_a_new_be_pod_gets_the_formulas_values_at_pod_and_container_level(
        real_root: RealRoot, tmp_path: Path) -> None:
    _v1(real_root)
    real_root.mkcg("besteffort")
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        ctl, _ = controller(fake.url, CgroupWriter(real_root.hierarchy, real_root.name))
        stop = asyncio.Event()
        task = asyncio.create_task(ctl.run(stop))
        try:
            assert await until(lambda: ctl.watching), "the controller watches the BE tier"
            real_root.mkcg(POD)
            _kubelet_be(real_root, POD)
            # 500/1000 batch-cpu, 256Mi/512Mi batch-memory, one container
            want = (512, 100_000, 100_000, 512 * MI)
            assert await until(lambda: _limits(real_root, POD) == want), f"pod limits {want}"
            real_root.mkcg(CONTAINER)
            assert await until(lambda: _limits(real_root, CONTAINER) == want), f"container limits {want}"
            assert await until(lambda: ctl.fetches >= 2), "each creation fetches the pod list at once"
            enforced = ctl.executor.enforced[f"k8s/{UID}"]
            assert enforced.source == "spec" and [c.rel for c in enforced.containers] == [CONTAINER]
            registry = CollectorRegistry()
            registry.register(BatchLimitsMetrics(ctl))
            labels = {"pod": "batch/batch-job", "level": "container", "cgroup": CONTAINER, "source": "spec"}
            assert registry.get_sample_value("coloc_batch_limit_cpu_cores", labels) == 1.0
            assert registry.get_sample_value("coloc_batch_limit_memory_bytes", {**labels, "level": "pod",
                                                                                "cgroup": POD}) == 512 * MI
            assert registry.get_sample_value("coloc_batch_limits_on_creation") == 1.0
        finally:
            stop.set()
            await task


async def test_limits_hold_a_cpu_burner_to_one_core_and_oom_kill_a_hog_in_its_own_cgroup(
        real_root: RealRoot, tmp_path: Path) -> None:
    _v1(real_root)
    for rel in ("besteffort", POD, CONTAINER, "burstable/podhp"):
        real_root.mkcg(rel)
    _kubelet_be(real_root, POD)
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        ctl, kubelet = controller(fake.url, CgroupWriter(real_root.hierarchy, real_root.name), watch=False)
        await kubelet.refresh()
        assert ctl.pass_once().enforced == 1
    assert _limits(real_root, CONTAINER) == (512, 100_000, 100_000, 512 * MI)

    hp = real_root.spawn("burstable/podhp", [sys.executable, "-c",
                                             "b = bytearray(64 << 20); import time; time.sleep(60)"])
    burners = [real_root.spawn(CONTAINER, [sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    usage = real_root.path("cpuacct", POD) / "cpuacct.usage"
    time.sleep(0.3)
    u0, t0 = int(read(usage)), time.monotonic()
    while int(read(usage)) - u0 < 1.5e9 and time.monotonic() - t0 < 20:  # 1.5 CPU-seconds, however busy
        time.sleep(0.1)
    cores = (int(read(usage)) - u0) / 1e9 / (time.monotonic() - t0)
    for b in burners:
        b.kill()
        b.wait()
    assert cores <= 1.1, f"two burners under a 1-core batch limit used {cores:.2f} cores"
    assert int(read(usage)) - u0 >= 1.5e9 or cores > 0.05, f"the burners hardly ran ({cores:.2f} cores)"
    throttled = sum(_stat(real_root, "cpu", rel, "cpu.stat")["nr_throttled"] for rel in (POD, CONTAINER))
    # on a busy machine the two burners may not get past one core (a group the machine holds at or under its
    # quota in every period is never throttled: 0.99 and 1.0007 cores were seen so, the latter the clocks'
    # noise); past it, the quota is what stops them
    assert throttled > 0 or cores < 1.05, f"{cores:.3f} cores and never throttled"

    hog = real_root.spawn(CONTAINER, [sys.executable, "-c",
                                      "b = bytearray(900 << 20); import time; time.sleep(60)"])
    deadline = time.monotonic() + 30
    while hog.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hog.returncode == -9, f"the hog should be OOM-killed, got {hog.returncode}"
    assert _stat(real_root, "memory", CONTAINER, "memory.oom_control").get("oom_kill", 1) >= 1, \
        "the kill came from the container's own memory cgroup"
    assert int(read(real_root.path("memory", CONTAINER) / "memory.max_usage_in_bytes")) <= 512 * MI
    assert hp.poll() is None, "the HP process beside it is untouched"
    assert _stat(real_root, "memory", "burstable/podhp", "memory.oom_control").get("oom_kill", 0) == 0


async def test_a_pod_that_leaves_gets_the_kubelets_values_back(real_root: RealRoot, tmp_path: Path) -> None:
    _v1(real_root)
    for rel in ("besteffort", POD, CONTAINER):
        real_root.mkcg(rel)
    _kubelet_be(real_root, POD)
    listed = write_list(tmp_path / "pods.json", be_pod())
    with FakeKubelet(listed) as fake:
        ctl, kubelet = controller(fake.url, CgroupWriter(real_root.hierarchy, real_root.name), watch=False)
        await kubelet.refresh()
        ctl.pass_once()
        assert _limits(real_root, POD) == (512, 100_000, 100_000, 512 * MI)
        gone = be_pod()
        del gone["metadata"]["labels"]["koordinator.sh/qosClass"]  # no longer a koord BE pod
        fake.serve(write_list(tmp_path / "pods2.json", gone))
        await kubelet.refresh()
        report = ctl.pass_once()
    assert report.restored == (f"k8s/{UID}",)
    for rel in (POD, CONTAINER):
        _, quota, _, memory = _limits(real_root, rel)
        assert (quota, memory) == (-1, UNLIMITED_V1), rel
    assert _limits(real_root, POD)[0] == 2
    assert not ctl.executor.enforced


async def test_tightening_and_loosening_keep_the_parent_quota_at_or_above_the_child(
        real_root: RealRoot, tmp_path: Path) -> None:
    """v1 refuses a child quota above its parent's: 2 cores → 0.5 → 3 must each apply without an error."""
    _v1(real_root)
    for rel in ("besteffort", POD, CONTAINER):
        real_root.mkcg(rel)
    with FakeKubelet(write_list(tmp_path / "p.json", be_pod(cpu=("1000", "2000")))) as fake:
        ctl, kubelet = controller(fake.url, CgroupWriter(real_root.hierarchy, real_root.name), watch=False)
        for limit, quota in (("2000", 200_000), ("500", 50_000), ("3000", 300_000)):
            fake.serve(write_list(tmp_path / f"p{limit}.json", be_pod(cpu=("100", limit))))
            await kubelet.refresh()
            report = ctl.pass_once()
            assert f"k8s/{UID}" not in report.pending, report.pending
            assert _limits(real_root, POD)[1] == quota and _limits(real_root, CONTAINER)[1] == quota
        again = ctl.pass_once()
        assert again.written == 0, "unchanged values are not rewritten"


@pytest.mark.parametrize("annotation", ["{not json", json.dumps({"containers": {"executor": {
    "limits": {"kubernetes.io/batch-memory": "-5Mi"}}}})])
async def test_a_malformed_annotation_is_named_and_changes_nothing(
        real_root: RealRoot, tmp_path: Path, annotation: str) -> None:
    _v1(real_root)
    for rel in ("besteffort", POD):
        real_root.mkcg(rel)
    _kubelet_be(real_root, POD)
    pod = be_pod(annotations={"node.koordinator.sh/extended-resource-spec": annotation})
    pod["spec"]["containers"][0]["resources"] = {}  # nothing in the spec: the annotation is needed
    before = _limits(real_root, POD)
    with FakeKubelet(write_list(tmp_path / "pods.json", pod)) as fake:
        ctl, kubelet = controller(fake.url, CgroupWriter(real_root.hierarchy, real_root.name), watch=False)
        await kubelet.refresh()
        report = ctl.pass_once()
    assert "extended-resource-spec" in report.pending[f"k8s/{UID}"]
    assert _limits(real_root, POD) == before
    assert f"k8s/{UID}" not in ctl.executor.enforced
