"""Protected pods never become victims, on every path that picks or touches one.

The pods come from the kubelet's `/pods` (a PodList in the kubelet's own format, served by the local fake
kubelet: a real kubelet cannot run here) through the real KubeletSource. Beside real batch pods it lists
what runs on every node as BestEffort: kube-proxy and a CNI agent (system-node-critical DaemonSets), a log
shipper (a DaemonSet), a static pod, a pod in kube-system and a batch pod that opted out. The usage figures
of each workload are set in the snapshot (the policies are pure; the cgroup collector is tested elsewhere)
and chosen so that every path would need more than the batch pods hold: without protection it would take
the protected pods too.
"""

from __future__ import annotations

import dataclasses
import json

from kit.snapshot import evicted_keys
from protectkit import BATCH, GIB, HP, PROTECTED, fetch, names, snapshot, with_usage

from agent.decommission.controller import DrainController, request_drain
from agent.state.ledger import Ledger, LedgerConfig
from qos import cpu_eviction, memory_eviction
from qos.actions import Evict
from qos.batch import BatchConfig, BatchState, decide_batch, ledger_view
from qos.drain import DrainPolicy, DrainTerms, decide_drain, drain_decision
from qos.model import BeTierState, Resources
from qos.pipeline import Pipeline
from qos.policies import PolicyConfig
from qos.registry import node_qos_policies


async def test_memory_pressure_evicts_only_batch_pods() -> None:
    """The measured defect: a BestEffort system-node-critical pod was a memory victim."""
    src = await fetch()
    wl = with_usage(src.workloads, mem=GIB)
    # 15 GiB of 16 in use: down to 68 % needs 4.1 GiB, more than the three batch pods' 3 GiB.
    snap = snapshot(wl, at=1000.0, node_mem=15 * GIB)
    actions, _ = memory_eviction.decide(snap, memory_eviction.MemoryEvictionConfig(),
                                        memory_eviction.MemoryEvictionState())
    chosen = names(src, evicted_keys(actions))
    assert chosen == BATCH, f"victims {sorted(chosen)}"


async def test_cpu_satisfaction_evicts_only_batch_pods() -> None:
    src = await fetch()
    # The opted-out trainer asks batch CPU and burns the most: first in line if it were a candidate.
    wl = with_usage(src.workloads, cpu={"trainer-opted-out-0": 900.0, "spark-exec-7": 50.0,
                                        "spark-exec-8": 50.0})
    snap = snapshot(wl, at=1000.0, be_cpu=100.0, be_tier=BeTierState(cpuset=(7,), quota_milli_cpu=100))
    cfg = cpu_eviction.CpuEvictionConfig(window_s=1.0, satisfaction_upper_percent=100.0, cool_down_s=0.0)
    actions, _ = cpu_eviction.decide(snap, cfg, cpu_eviction.CpuEvictionState())
    evicted = evicted_keys(actions)
    assert evicted, actions
    assert names(src, evicted) <= BATCH
    numbers = next(a for a in actions if isinstance(a, Evict)).numbers
    assert numbers["be_request_milli_cpu"] == 3500, "the protected pod's batch request is not BE demand"


async def test_the_combined_policies_under_both_pressures_pick_only_batch() -> None:
    src = await fetch()
    wl = with_usage(src.workloads, mem=GIB, cpu={"trainer-opted-out-0": 900.0})
    snap = snapshot(wl, at=1000.0, node_mem=15 * GIB, be_cpu=100.0,
                    be_tier=BeTierState(cpuset=(7,), quota_milli_cpu=100))
    pipeline = Pipeline(node_qos_policies(PolicyConfig()))
    actions, _ = pipeline.decide(snap, pipeline.initial_state())
    assert names(src, evicted_keys(actions)) <= BATCH
    assert {w.name for w in snap.be_workloads} == BATCH


async def test_batch_overcommit_releases_only_batch_pods() -> None:
    src = await fetch()
    snap = snapshot(src.workloads, at=1000.0)
    origin = json.dumps({"resources": {"kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"}})
    view = ledger_view(Resources(0, 0), snap.workloads)
    assert view.k8s_requested == Resources(3500, 6 * GIB), "only the batch pods' requests count"
    # A zero origin counts only with a fresh usage report, once confirmed (issue 13): both given here.
    snap = dataclasses.replace(snap, origin_annotation=origin, usage_report_age_s=1.0)
    actions, _ = decide_batch(snap, BatchConfig(origin_confirm_s=0), BatchState())
    evicted = evicted_keys(actions)
    assert names(src, evicted) == {"spark-exec-7", "spark-exec-8"}  # etl asks nothing: releases nothing


async def test_forceful_drain_evicts_only_batch_pods() -> None:
    src = await fetch()
    terms = DrainTerms(graceful=False, wait_for_apps=False, started_at=1000.0, deadline=1000.0)
    d = decide_drain(terms, src.workloads, (), (), (), (), 1000.0)
    assert names(src, evicted_keys(list(d.evict))) == BATCH
    assert d.allocations_left == len(BATCH)


async def test_drain_controller_evicts_only_batch_pods() -> None:
    src = await fetch()
    now = 1000.0
    ledger = Ledger.open(LedgerConfig("node-a", state_path=None), boot_id="boot", clock=lambda: now)
    snap = snapshot(src.workloads, at=now)
    ledger.sync(snap, Resources(8000, 16 * GIB), now)
    ledger.ack_recovery(1, ledger.revision)
    request_drain(ledger, 1, graceful=False, timeout_s=0)
    ctl = DrainController(ledger, clock=lambda: now)
    evicted = evicted_keys(DrainPolicy().decide(dataclasses.replace(snap, drain=ctl.view(snap)), None)[0])
    assert names(src, evicted) == BATCH
    # Past the deadline too: the protected pods stay, and do not hold the drain up.
    later = dataclasses.replace(snap, workloads=tuple(w for w in snap.workloads if w.name not in BATCH))
    later = dataclasses.replace(later, drain=ctl.view(later))
    assert evicted_keys(DrainPolicy().decide(later, None)[0]) == []
    dec = drain_decision(later)
    assert dec is not None and dec.allocations_left == 0


async def test_fixture_holds_what_the_paths_rely_on() -> None:
    src = await fetch()
    assert {w.name for w in src.workloads} == PROTECTED | BATCH | HP
