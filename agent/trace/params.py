"""The settings a tick's decision depends on, as one value: what the pipeline is built from, and the
executor's guards on evictions (rate limit, cool-down, dry run). The agent builds its pipeline from it, the
trace records it, and a replay builds the same pipeline from it (or from a config file and overrides)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agent.config.agent import AgentConfig
from qos.batch import BatchConfig
from qos.io import IoPolicyConfig
from qos.network import NetworkPolicyConfig
from qos.pipeline import Pipeline
from qos.policies import PolicyConfig
from qos.registry import NodeOutputs, build_pipeline


@dataclass(frozen=True, slots=True)
class EvictionGuards:
    """The executor's last guards on an eviction, as `eviction:` configures them."""

    dry_run: bool = False
    rate_per_s: float = 10 / 60
    burst: int = 3
    cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class TickSettings:
    """Everything a tick's decision is made with besides the snapshot and the policies' state."""

    policies: PolicyConfig
    batch: BatchConfig
    network: NetworkPolicyConfig | None
    yarn_entries: tuple[str, ...]
    io: IoPolicyConfig | None
    guards: EvictionGuards

    def pipeline(self) -> Pipeline[NodeOutputs]:
        return build_pipeline(self.policies, self.batch, self.network, self.yarn_entries, self.io)


def idle_rule(settings: PolicyConfig, tier_owned: bool) -> PolicyConfig:
    """Suppression does not ask for `cpu.idle` on a tier the kubelet owns (the executor would refuse it:
    agent/executors/be_knobs.py says why)."""
    if tier_owned or not settings.suppression.cpu_idle:
        return settings
    suppression = dataclasses.replace(settings.suppression, cpu_idle=False)
    return dataclasses.replace(settings, suppression=suppression)


def yarn_entries(cfg: AgentConfig) -> tuple[str, ...]:
    """The thirdPartyAllocations entries that report the YARN this agent counts itself from its NodeManager
    (its own entry and koord-yarn-operator's): not other allocators. Without the YARN source, its own entry
    only: one an earlier run left is stale and being withdrawn (`NodeReports`), not another allocator's."""
    if not cfg.sources.yarn.enabled:
        return (cfg.sources.reporting.allocation_name,)
    return cfg.sources.reporting.allocation_name, cfg.sources.reporting.operator_entry


def tick_settings(cfg: AgentConfig, policies: PolicyConfig, io: bool) -> TickSettings:
    """The settings of a tick of an agent run with `cfg` and the policy settings in force `policies` (the
    YAML's or a NodeSLO's); `io`: whether the disk guard runs."""
    ev = cfg.eviction
    return TickSettings(idle_rule(policies, cfg.cgroups.setup_tiers), cfg.batch,
                        cfg.network.policy if cfg.network.enabled else None, yarn_entries(cfg),
                        cfg.io.policy if io else None,
                        EvictionGuards(ev.dry_run, ev.rate_per_minute / 60.0, ev.burst,
                                       ev.recheck_cooldown_s))
