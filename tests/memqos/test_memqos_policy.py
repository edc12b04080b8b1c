"""Memory QoS and CPU burst formulas (qos/memory_qos.py, qos/cpu_burst.py) against koordlet's
`cgroup_reconcile.go` and `cpu_burst.go`, with hand-built pods; protected pods are never touched."""

from __future__ import annotations

import pytest
from kit.snapshot import k8s_workload, node_snapshot

from qos import cpu_burst, memory_qos
from qos.cpu_burst import CpuBurstSettings
from qos.memory_qos import MemoryQosClass, MemoryQosSettings, QosContainer, QosPod

MI, GI = 1 << 20, 1 << 30
NODE = 8 * GI
ON = MemoryQosClass(enable=True, min_limit_percent=100, low_limit_percent=50, throttling_percent=80)


def _pod(name: str, kube: str, label: str | None, *containers: QosContainer,
         protected: bool = False) -> QosPod:
    return QosPod(f"k8s/{name}", f"default/{name}", f"{kube.lower()}/pod{name}", kube, label, containers,
                  protected)


def _pods_of_snapshot() -> tuple[QosPod, ...]:
    """Pods named after a snapshot's workloads, keeping their protected flag (as the kubelet source does)."""
    snap = node_snapshot([k8s_workload("web", 9000, 1, 0, be=False),
                          k8s_workload("proxy", 2_000_000_000, 0.1, 0, be=False, protected=True)])
    c = QosContainer("c", "x", 512 * MI, GI, 2000)
    return tuple(_pod(w.name, "Burstable", None, QosContainer("c", f"{w.cgroup}/c", c.memory_request,
                      c.memory_limit, c.cpu_limit_milli), protected=w.protected) for w in snap.workloads)


def test_container_min_low_high_follow_koordlet_and_pod_has_no_high() -> None:
    pod = _pod("web", "Burstable", "LS", QosContainer("c", "burstable/podweb/c", 512 * MI, GI, None))
    plan = memory_qos.plan([pod], MemoryQosSettings(ls=ON), NODE)
    pv, cv = plan.pods["default/web"]
    # a positive low below min is raised to min
    assert (pv.min_bytes, pv.low_bytes, pv.sets_high) == (512 * MI, 512 * MI, False)
    # high = req + (limit - req) * 80 %, page-aligned
    assert cv.high_bytes == (512 * MI + (GI - 512 * MI) * 80 // 100) // 4096 * 4096
    assert (cv.min_bytes, cv.low_bytes) == (512 * MI, 512 * MI)
    assert plan.tiers["burstable"] == (512 * MI, 512 * MI) and plan.tiers[""] == (512 * MI, 512 * MI)


def test_unset_limit_uses_node_allocatable_and_zero_throttling_is_max() -> None:
    c = QosContainer("c", "burstable/pod1/c", GI, None)
    cfg = MemoryQosClass(enable=True, throttling_percent=50)
    assert memory_qos.container_values(c, cfg, NODE).high_bytes == (GI + (NODE - GI) // 2) // 4096 * 4096
    off = MemoryQosClass(enable=True, min_limit_percent=50, throttling_percent=0)
    v = memory_qos.container_values(c, off, NODE)
    assert v.high_bytes is None and v.min_bytes == GI // 2  # "max"


def test_high_below_min_is_raised_to_min() -> None:
    c = QosContainer("c", "burstable/pod1/c", GI, GI + 4096)
    cfg = MemoryQosClass(enable=True, min_limit_percent=100, throttling_percent=1)
    assert memory_qos.container_values(c, cfg, NODE).high_bytes == GI


def test_disabled_class_is_all_zero_and_be_pods_count_batch_memory() -> None:
    be = _pod("batch", "BestEffort", "BE", QosContainer("c", "besteffort/podbatch/c", 256 * MI, None))
    plan = memory_qos.plan([be], MemoryQosSettings(ls=ON), NODE)
    assert [(v.min_bytes, v.low_bytes, v.high_bytes) for v in plan.pods["default/batch"]] == [
        (0, 0, None), (0, 0, None)]
    be_on = MemoryQosClass(enable=True, min_limit_percent=0, low_limit_percent=50)
    plan = memory_qos.plan([be], MemoryQosSettings(be=be_on), NODE)
    assert plan.pods["default/batch"][0].low_bytes == 128 * MI
    assert plan.tiers["besteffort"] == (0, 128 * MI) and plan.tiers["burstable"] == (0, 0)


def test_class_falls_back_to_the_kubernetes_class_and_lse_takes_lsr() -> None:
    assert _pod("g", "Guaranteed", None).koord_class == "LSR"
    assert _pod("b", "BestEffort", None).koord_class == "BE"
    assert _pod("x", "Burstable", "LSE").koord_class == "LSE"
    assert MemoryQosSettings(lsr=ON).of("LSE") == ON


def test_protected_pods_get_nothing() -> None:
    pods = _pods_of_snapshot()
    plan = memory_qos.plan(pods, MemoryQosSettings(ls=ON), NODE)
    assert set(plan.pods) == {"default/web"}
    burst = cpu_burst.plan(pods, CpuBurstSettings("cpuBurstOnly", 50), kubelet_resizes=False)
    assert set(burst.pods) == {"default/web"}


def test_burst_is_limit_times_percent_held_at_the_quota() -> None:
    pod = _pod("web", "Burstable", None, QosContainer("a", "p/a", cpu_limit_milli=2000),
               QosContainer("b", "p/b", cpu_limit_milli=500))
    plan = cpu_burst.plan([pod], CpuBurstSettings("cpuBurstOnly", 50), kubelet_resizes=False)
    assert [v.burst_us for v in plan.pods["default/web"]] == [125_000, 100_000, 25_000]
    # koordlet's default 1000 %: 10× the quota, which an upstream kernel refuses; held at the quota
    plan = cpu_burst.plan([pod], CpuBurstSettings("auto", 1000), kubelet_resizes=False)
    assert [v.burst_us for v in plan.pods["default/web"]] == [250_000, 200_000, 50_000]


def test_burst_edge_cases() -> None:
    unlimited = _pod("u", "Burstable", "LS", QosContainer("a", "p/a", cpu_limit_milli=1000),
                     QosContainer("b", "p/b", cpu_limit_milli=None),
                     QosContainer("c", None, cpu_limit_milli=1000))
    plan = cpu_burst.plan([unlimited], CpuBurstSettings("cpuBurstOnly", 100), kubelet_resizes=False)
    assert [v.burst_us for v in plan.pods["default/u"]] == [100_000, 100_000, 0]  # c not made: not summed
    not_burstable = [_pod(q, "Burstable", q) for q in ("LSR", "LSE", "BE")]
    assert cpu_burst.plan(not_burstable, CpuBurstSettings("cpuBurstOnly"), kubelet_resizes=False).pods == {}
    for policy in ("cfsQuotaBurstOnly", "none"):
        assert cpu_burst.plan([unlimited], CpuBurstSettings(policy), kubelet_resizes=False).cgroups == ()


@pytest.mark.parametrize("resizes", [True, None])
def test_where_the_kubelet_resizes_in_place_only_containers_a_cpu_resize_restarts_hold_a_burst(
        resizes: bool | None) -> None:
    """A held burst above a quota the kubelet lowers on a resize would make its write fail: no pod-level
    burst, and none on a container resized in place; not known (None) counts as resizing."""
    web = _pod("web", "Burstable", None, QosContainer("a", "p/a", cpu_limit_milli=2000),
               QosContainer("b", "p/b", cpu_limit_milli=500, cpu_resize_restarts=True))
    plain = _pod("plain", "Guaranteed", None, QosContainer("a", "q/a", cpu_limit_milli=1000))
    plan = cpu_burst.plan([web, plain], CpuBurstSettings("cpuBurstOnly", 50), kubelet_resizes=resizes)
    # 0 (not nothing) where a resize writes the quota: a burst an earlier run left there is cleared too
    assert [(v.rel, v.burst_us) for v in plan.cgroups] == [
        ("burstable/podweb", 0), ("p/a", 0), ("p/b", 25_000), ("guaranteed/podplain", 0), ("q/a", 0)]
    assert set(plan.pods) == {"default/web", "default/plain"}
    full = cpu_burst.plan([web, plain], CpuBurstSettings("cpuBurstOnly", 50), kubelet_resizes=False)
    assert [v.rel for v in full.cgroups] == ["burstable/podweb", "p/a", "p/b", "guaranteed/podplain", "q/a"]


@pytest.mark.parametrize("kw", [{"min_limit_percent": 101}, {"throttling_percent": -1}])
def test_out_of_range_percent_is_refused(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        MemoryQosClass(enable=True, **kw)
    with pytest.raises(ValueError, match="policy"):
        CpuBurstSettings("sometimes")


def test_zero_low_stays_zero_beside_a_positive_min() -> None:
    cfg = MemoryQosClass(enable=True, min_limit_percent=50, low_limit_percent=0)
    v = memory_qos.pod_values(_pod("p", "Burstable", None, QosContainer("c", "x", GI)), cfg)
    assert (v.min_bytes, v.low_bytes) == (GI // 2, 0)
