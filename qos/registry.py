"""The one place policies are registered: which run each tick, in what order, and what the agent reads back.

Order: CPU suppression; memory eviction (memory cannot be throttled, so it evicts first); CPU eviction;
the batch ledger's overcommit; a drain's DRAIN_TIMEOUT evictions; BE egress bandwidth and BE disk IO (when
configured).
Memory and CPU eviction share their pending victims; batch and drain keep their own and are de-duplicated
when the actions are merged. What the rest of the agent needs from a tick's decision is its named outputs
(`NodeOutputs`): BE's CPU grant, the batch budget, the drain's verdict.
To add a policy: write it in `qos/` as a `qos.pipeline.Policy`, and add it to `NodePolicies` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from qos.admission import BatchBudget
from qos.batch import BatchConfig, BatchPolicy, BatchState
from qos.cpu_eviction import CpuEvictionPolicy
from qos.drain import DrainDecision, DrainPolicy
from qos.io import IoPolicy, IoPolicyConfig
from qos.memory_eviction import MemoryEvictionPolicy
from qos.model import NodeSnapshot
from qos.network import NetworkPolicy, NetworkPolicyConfig
from qos.pipeline import Pipeline, PipelineState, Policy
from qos.policies import PolicyConfig
from qos.suppression import SuppressionPolicy, SuppressionState, bounds, granted_milli


class BeCpuGrant(NamedTuple):
    """What suppression grants BE now, in milli-cores; None where it does not know yet."""

    granted_milli: int | None
    floor_milli: int | None
    policy: str


@dataclass(frozen=True, slots=True)
class NodeOutputs:
    """What a tick's decision tells the agent: BE's CPU grant (suppression), the batch budget the batch policy
    holds (the admission rule's facts), and the drain's verdict (None: not draining, or stale data)."""

    be_cpu: BeCpuGrant
    batch_budget: BatchBudget
    drain: DrainDecision | None


def be_cpu_grant(policy: SuppressionPolicy, state: SuppressionState, snapshot: NodeSnapshot) -> BeCpuGrant:
    """What `policy` in `state` grants BE now: (budget, floor, policy), in milli-cores."""
    return BeCpuGrant(granted_milli(state, policy.config), bounds(snapshot, policy.config)[0],
                      policy.config.policy)


NodeQos = tuple[SuppressionPolicy, MemoryEvictionPolicy, CpuEvictionPolicy]


def node_qos_policies(config: PolicyConfig) -> NodeQos:
    """The node's own QoS: CPU suppression, memory eviction, CPU eviction."""
    return (SuppressionPolicy(config.suppression),
            MemoryEvictionPolicy(config.memory_eviction, config.failsafe),
            CpuEvictionPolicy(config.cpu_eviction, config.failsafe))


@dataclass(frozen=True, slots=True)
class NodePolicies:
    """Every policy of a tick, each under its role, so that what a tick tells the agent is read from the
    policy that knows it."""

    suppression: SuppressionPolicy
    memory: MemoryEvictionPolicy
    cpu: CpuEvictionPolicy
    batch: BatchPolicy
    drain: DrainPolicy
    network: NetworkPolicy | None = None
    io: IoPolicy | None = None

    @classmethod
    def of(cls, config: PolicyConfig, batch: BatchConfig | None = None,
           network: NetworkPolicyConfig | None = None, yarn_entries: tuple[str, ...] = (),
           io: IoPolicyConfig | None = None) -> NodePolicies:
        """`yarn_entries`: the thirdPartyAllocations entries that report the YARN the agent counts itself."""
        return cls(*node_qos_policies(config),
                   BatchPolicy(batch or BatchConfig(origin="local"), yarn_entries=yarn_entries),
                   DrainPolicy(),
                   NetworkPolicy(network) if network is not None else None,
                   IoPolicy(io, config.failsafe) if io is not None else None)

    def ordered(self) -> tuple[Policy[Any], ...]:
        """In the order they run (BE egress and IO last: they act only on their own readings)."""
        return (self.suppression, self.memory, self.cpu, self.batch, self.drain,
                *((self.network,) if self.network is not None else ()),
                *((self.io,) if self.io is not None else ()))

    def outputs(self, snapshot: NodeSnapshot, state: PipelineState) -> NodeOutputs:
        suppression: SuppressionState = state[self.suppression.name]
        batch: BatchState = state[self.batch.name]
        drain: DrainDecision | None = state[self.drain.name]
        return NodeOutputs(be_cpu_grant(self.suppression, suppression, snapshot), batch.budget, drain)


def policies(config: PolicyConfig, batch: BatchConfig | None = None,
             network: NetworkPolicyConfig | None = None,
             yarn_entries: tuple[str, ...] = (), io: IoPolicyConfig | None = None) -> tuple[Policy[Any], ...]:
    """Every policy of a tick, in the order they run."""
    return NodePolicies.of(config, batch, network, yarn_entries, io).ordered()


def build_pipeline(config: PolicyConfig, batch: BatchConfig | None = None,
                   network: NetworkPolicyConfig | None = None,
                   yarn_entries: tuple[str, ...] = (),
                   io: IoPolicyConfig | None = None) -> Pipeline[NodeOutputs]:
    """The node's pipeline; its decisions carry `NodeOutputs`."""
    node = NodePolicies.of(config, batch, network, yarn_entries, io)
    return Pipeline(node.ordered(), node.outputs)
