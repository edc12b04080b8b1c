"""Scheduler-side recovery: rebuild per-node allocation state from the agents (`coloc-agent recover`)."""

from agent.recovery.cluster import Cluster, NodeCache, NodeState, ProtocolError
from agent.recovery.driver import Progress, Recovery, RecoveryConfig, SchedulerState

__all__ = ["Cluster", "NodeCache", "NodeState", "Progress", "ProtocolError", "Recovery", "RecoveryConfig",
           "SchedulerState"]
