"""The batch policy counts what koord-manager subtracts from the origin: every `koord-batch` entry of
`node.koordinator.sh/thirdPartyAllocations` (koordinator v1.8.0 `GetThirdPartyAllocatedResByPriority(...,
PriorityBatch)`), except the entries that report the YARN the agent counts itself from its NodeManager. It
hands the admission rule (`qos.admission`) its budget, and says why admissions are refused when nothing else
it emits does. Pure: hand-made snapshots."""

from __future__ import annotations

import dataclasses
import json

from kit.snapshot import k8s_workload as pod
from kit.snapshot import node_snapshot
from kit.snapshot import yarn_workload as yarn

from qos.actions import Evict, Hold, HoldReason
from qos.admission import AdmissionFacts, Refusal, admit
from qos.batch import BatchConfig, BatchState, decide_batch, ledger_view
from qos.model import NodeSnapshot, Resources, Usage, Workload

GIB = 1 << 30
TS = 1700000000000
ORIGIN_8 = json.dumps(
    {"resources": {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": "64Gi"}})


def snap(workloads: list[Workload], stale: dict[str, str] | None = None,
         origin_annotation: str | None = None) -> NodeSnapshot:
    return node_snapshot(workloads, taken_at=1000.0, system=Usage(1000.0, 2 * GIB), stale=stale or {},
                         origin_annotation=origin_annotation)

YARN_ENTRIES = ("coloc-agent-yarn", "hadoop-yarn")  # ours and koord-yarn-operator's: the YARN we count


def entry(name: str, priority: str, milli: int, mem: int = 0) -> dict[str, object]:
    return {"name": name, "priority": priority,
            "resources": {"kubernetes.io/batch-cpu": str(milli), "kubernetes.io/batch-memory": str(mem)}}


def with_others(s: NodeSnapshot, *entries: dict[str, object]) -> NodeSnapshot:
    return dataclasses.replace(s, third_party_annotation=json.dumps({"allocations": list(entries)}))


# k8s 1 + 2 = 3 cores, YARN 1 (AM) + 2 = 3 cores: 6 of an origin of 8 cores.
WORK = [pod("free-pod", 3500, 1, 100), pod("batch-a", 5500, 2, 100), yarn(1, 1, 200), yarn(2, 2, 210)]


def test_another_allocators_3000m_makes_the_node_overcommitted() -> None:
    s = with_others(snap(WORK, origin_annotation=ORIGIN_8), entry("flink-native", "koord-batch", 3000, GIB))
    actions, state = decide_batch(s, BatchConfig(), BatchState(), YARN_ENTRIES)
    evicts = [a for a in actions if isinstance(a, Evict)]
    assert [e.key for e in evicts] == ["k8s/free-pod"], "1000 m over: the lowest priority goes"
    assert "k8s 3000m + yarn 3000m + other allocators 3000m > origin 8000m" in evicts[0].message
    assert evicts[0].numbers["others_milli_cpu"] == 3000 and evicts[0].numbers["overcommit_milli_cpu"] == 1000
    assert state.budget.others == Resources(3000, GIB)
    assert state.budget.allocatable == Resources(5000, 63 * GIB)
    # The admission rule, on the same budget: nothing fits while the node is over.
    refused = admit(Resources(1, 0), AdmissionFacts(state.budget, Resources(6000, 4 * GIB)))
    assert refused.refusal is Refusal.INSUFFICIENT_CPU
    assert refused.reason.startswith("batch overcommitted by 1000m CPU")
    assert "other allocators 3000m" in refused.reason


def test_only_other_allocators_koord_batch_entries_count() -> None:
    entries = [entry("flink-native", "koord-batch", 1000), entry("spark-free", "koord-free", 5000),
               entry("mid-app", "koord-mid", 5000), entry("coloc-agent-yarn", "koord-batch", 3000),
               entry("hadoop-yarn", "koord-batch", 3000), {"name": "nameless", "priority": "Koord-Batch"}]
    s = with_others(snap(WORK, origin_annotation=ORIGIN_8), *entries)
    actions, state = decide_batch(s, BatchConfig(), BatchState(), YARN_ENTRIES)
    assert actions == [] and state.budget.others == Resources(1000, 0)
    # Without the YARN source nothing here counts YARN: every koord-batch entry is someone else's.
    _, state = decide_batch(s, BatchConfig(), BatchState())
    assert state.budget.others == Resources(7000, 0)
    assert ledger_view(Resources(8000, 64 * GIB), WORK, state.budget.others).overcommit == Resources(5000, 0)


def test_empty_third_party_values_count_nothing() -> None:
    for value in ("{}", '{"allocations":null}', "null"):
        s = dataclasses.replace(snap(WORK, origin_annotation=ORIGIN_8), third_party_annotation=value)
        actions, state = decide_batch(s, BatchConfig(), BatchState(), YARN_ENTRIES)
        assert actions == [] and state.budget.held is None and state.budget.others == Resources()


UNREADABLE = ('{"allocations":[{"name":"x","priority":"koord-batch",'
              '"resources":{"kubernetes.io/batch-cpu":"lots"}}]}')


def test_an_unreadable_value_refuses_admissions_naming_it_and_releases_only_what_is_certain() -> None:
    s = dataclasses.replace(snap(WORK, origin_annotation=ORIGIN_8), third_party_annotation=UNREADABLE)
    actions, state = decide_batch(s, BatchConfig(), BatchState(), YARN_ENTRIES)
    assert [type(a) for a in actions] == [Hold]
    assert isinstance(actions[0], Hold)
    assert "allocations[0].resources: kubernetes.io/batch-cpu: not a quantity" in actions[0].reason
    refused = admit(Resources(1, 0), AdmissionFacts(state.budget, Resources()))
    assert refused.refusal is Refusal.BUDGET_UNKNOWN and "holdings unusable" in refused.reason
    # k8s + YARN alone over the origin: over whatever the others hold, so released all the same.
    more = dataclasses.replace(s, workloads=(*WORK, pod("batch-b", 5500, 3, 300)))
    actions, _ = decide_batch(more, BatchConfig(), BatchState(), YARN_ENTRIES)
    assert [a.key for a in actions if isinstance(a, Evict)] == ["k8s/free-pod"]


def test_stale_data_within_budget_says_admissions_are_refused() -> None:
    s = snap(WORK, stale={"kubelet": "no answer for 40s"}, origin_annotation=ORIGIN_8)
    actions, _ = decide_batch(s, BatchConfig(), BatchState(), YARN_ENTRIES)
    # The sources' reasons carry ages: the Hold's words name the sources only.
    assert actions == [Hold("batch_overcommit", HoldReason.ADMISSIONS_REFUSED,
                            "admissions refused: stale data from kubelet")]
