"""The one place policies are registered: which run each tick, and in what order.

Order: CPU suppression; memory eviction (memory cannot be throttled, so it evicts first); CPU eviction;
the batch ledger's overcommit; a drain's DRAIN_TIMEOUT evictions; BE egress bandwidth (when configured).
Memory and CPU eviction share their pending victims; batch and drain keep their own and are de-duplicated
when the actions are merged.
To add a policy: write it in `qos/` as a `qos.pipeline.Policy`, and add it to `policies` below.
"""

from __future__ import annotations

from typing import Any

from qos.admission import BatchBudget
from qos.batch import BatchConfig, BatchPolicy, BatchState
from qos.cpu_eviction import CpuEvictionPolicy
from qos.drain import DrainPolicy
from qos.memory_eviction import MemoryEvictionPolicy
from qos.model import NodeSnapshot, Resources
from qos.network import NetworkPolicy, NetworkPolicyConfig
from qos.pipeline import Pipeline, PipelineState, Policy
from qos.policies import PolicyConfig
from qos.suppression import SuppressionPolicy, SuppressionState, bounds, granted_milli


def node_qos_policies(config: PolicyConfig) -> tuple[Policy[Any], ...]:
    """The node's own QoS: CPU suppression, memory eviction, CPU eviction."""
    return (
        SuppressionPolicy(config.suppression),
        MemoryEvictionPolicy(config.memory_eviction, config.failsafe),
        CpuEvictionPolicy(config.cpu_eviction, config.failsafe),
    )


def policies(config: PolicyConfig, batch: BatchConfig | None = None,
             network: NetworkPolicyConfig | None = None,
             yarn_entries: tuple[str, ...] = ()) -> tuple[Policy[Any], ...]:
    """Every policy of a tick, in the order they run (BE egress last: it acts only on network readings).
    `yarn_entries`: the thirdPartyAllocations entries that report the YARN the agent counts itself."""
    return (
        *node_qos_policies(config),
        BatchPolicy(batch or BatchConfig(origin="local"), yarn_entries=yarn_entries),
        DrainPolicy(),
        *((NetworkPolicy(network),) if network is not None else ()),
    )


def build_pipeline(config: PolicyConfig, batch: BatchConfig | None = None,
                   network: NetworkPolicyConfig | None = None,
                   yarn_entries: tuple[str, ...] = ()) -> Pipeline:
    return Pipeline(policies(config, batch, network, yarn_entries))


def be_cpu_grant(pipeline: Pipeline, state: PipelineState,
                 snapshot: NodeSnapshot) -> tuple[int | None, int | None, str]:
    """What suppression grants BE now: (budget, floor, policy), in milli-cores; None where it does not run."""
    for p in pipeline.policies:
        if isinstance(p, SuppressionPolicy):
            sup = state[p.name]
            granted = granted_milli(sup, p.config) if isinstance(sup, SuppressionState) else None
            return granted, bounds(snapshot, p.config)[0], p.config.policy
    return None, None, ""


def batch_origin(pipeline: Pipeline, state: PipelineState) -> Resources | None:
    """The batch budget (origin) in force, None while unknown (or with no batch policy)."""
    budget = batch_budget(pipeline, state)
    return budget.origin if budget is not None else None


def batch_budget(pipeline: Pipeline, state: PipelineState) -> BatchBudget | None:
    """The batch budget as the batch policy holds it (origin in force, why it is held, what other allocators
    hold): the admission rule's facts. None with no batch policy."""
    for p in pipeline.policies:
        if isinstance(p, BatchPolicy):
            batch = state[p.name]
            return batch.budget if isinstance(batch, BatchState) else BatchBudget()
    return None
