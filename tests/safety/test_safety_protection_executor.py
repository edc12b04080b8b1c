"""The executor's own guard: an Evict naming a protected workload is refused with outcome `protected`, the
evictor is never called, and `coloc_protected_refusals_total` counts it — whatever the policy said and
however the workload is marked (even BE). The workloads come from the fake kubelet's PodList through the
real KubeletSource; the evictor is a recording one of our own interface (the real evictors are tested
against the fake API server elsewhere); the counter is read from the real Prometheus exposition."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

from kit.poll import still
from kit.snapshot import published
from prometheus_client import generate_latest
from protectkit import fetch, snapshot

from agent.executors.apply import ActionExecutor, EvictOutcome
from agent.metrics import MetricsConfig, MetricsHub
from agent.published import ActionRecord, Board, Counters
from cgroups.discovery import Hierarchy
from cgroups.writer import CgroupWriter
from qos.actions import Evict, EvictReason
from qos.model import NodeSnapshot, Source, Workload


class Recorder:
    def __init__(self) -> None:
        self.evicted: list[str] = []

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        self.evicted.append(workload.key)
        return EvictOutcome(True, "recorded")


def _executor(tmp_path: Path, rec: Recorder, audit: list[ActionRecord], *,
              dry_run: bool = False) -> ActionExecutor:
    (tmp_path / "cg").mkdir(exist_ok=True)
    writer = CgroupWriter(Hierarchy.v2(tmp_path), "cg")
    return ActionExecutor(writer, "besteffort", {Source.K8S: rec}, dry_run=dry_run, rate_per_s=1.0, burst=10,
                          recheck_cooldown_s=60.0, audit=audit.append, now=time.monotonic(), tier_owned=True)


def _refusals(ex: ActionExecutor) -> dict[str, float]:
    """coloc_protected_refusals_total by policy, as a scrape shows it (counters built as the loop does)."""
    board = Board()
    board.publish(published(tick_duration_s=0.01, collect_duration_s=0.01,
                            counters=Counters(holds=dict(ex.holds))))
    hub = MetricsHub(MetricsConfig(port=0))
    hub.attach(board)
    text = generate_latest(hub.registry).decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^coloc_protected_refusals_total\{policy="(\w+)"\} (\S+)$', text, flags=re.M)}


async def _fixture_snapshot() -> tuple[NodeSnapshot, dict[str, Workload]]:
    src = await fetch()
    by_name = {w.name: w for w in src.workloads}
    # A classification slip upstream: the kube-proxy pod arrives marked BE (as before the fix) but protected.
    slipped = dataclasses.replace(by_name["kube-proxy-7xk2p"], be=True)
    workloads = tuple(slipped if w.name == "kube-proxy-7xk2p" else w for w in src.workloads)
    by_name["kube-proxy-7xk2p"] = slipped
    return snapshot(workloads, at=time.time()), by_name


async def test_a_protected_target_is_refused_and_counted(tmp_path: Path) -> None:
    snap, pods = await _fixture_snapshot()
    rec, audit = Recorder(), []
    ex = _executor(tmp_path, rec, audit)
    assert _refusals(ex) == {r.value: 0.0 for r in EvictReason}, "every policy starts at 0"
    proxy, shipper, spark = pods["kube-proxy-7xk2p"], pods["fluent-bit-h2k9z"], pods["spark-exec-7"]
    assert proxy.be and proxy.protected
    records = ex.execute([
        Evict(proxy.key, EvictReason.MEMORY_PRESSURE, "node working set 94% >= 70%"),
        Evict(shipper.key, EvictReason.DRAIN_TIMEOUT, "drain deadline passed"),
        Evict(spark.key, EvictReason.MEMORY_PRESSURE, "node working set 94% >= 70%"),
    ], snap)
    await ex.drain(2)
    assert [(r.target, r.outcome) for r in records] == [
        (proxy.key, "protected"), (shipper.key, "protected"), (spark.key, "started")]
    assert records[0].reason == "protected: node working set 94% >= 70%"
    assert rec.evicted == [spark.key], "the evictor never saw a protected pod"
    assert ex.holds[("memory_pressure", "protected")] == 1 and ex.holds[("drain_timeout", "protected")] == 1
    assert _refusals(ex) == {"cpu_satisfaction": 0.0, "memory_pressure": 1.0, "batch_overcommit": 0.0,
                             "drain_timeout": 1.0, "io_pressure": 0.0}
    assert [a.outcome for a in audit if a.target == proxy.key] == ["protected"]


async def test_protected_comes_before_stale_data_and_dry_run(tmp_path: Path) -> None:
    snap, pods = await _fixture_snapshot()
    proxy, spark = pods["kube-proxy-7xk2p"], pods["spark-exec-7"]
    rec, audit = Recorder(), []
    ex = _executor(tmp_path, rec, audit, dry_run=True)
    records = ex.execute([Evict(proxy.key, EvictReason.CPU_SATISFACTION, "starved"),
                                Evict(spark.key, EvictReason.CPU_SATISFACTION, "starved")], snap)
    assert [r.outcome for r in records] == ["protected", "dry_run"], "a dry run never says it would evict it"
    stale = dataclasses.replace(snap, stale={"kubelet": "down"})
    records = ex.execute([Evict(proxy.key, EvictReason.BATCH_OVERCOMMIT, "over"),
                                Evict(spark.key, EvictReason.BATCH_OVERCOMMIT, "over")], stale)
    assert [r.outcome for r in records] == ["protected", "skipped"]
    assert "stale_data" in records[1].reason
    assert await still(lambda: rec.evicted == [], 0.1)
    assert _refusals(ex)["cpu_satisfaction"] == 1.0 and _refusals(ex)["batch_overcommit"] == 1.0
