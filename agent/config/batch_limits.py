"""Config of BE pods' batch limits (`batch_limits:`): koordlet's `batchresource` hook, done by the agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.config.load import ConfigError
from qos.validation import bounded, check_bounds, check_choices

__all__ = ["BatchLimitsConfig"]


@dataclass(frozen=True)
class BatchLimitsConfig:
    """Pod- and container-level cgroup limits of pods labelled `koordinator.sh/qosClass: BE`, from their
    `kubernetes.io/batch-cpu` / `batch-memory` (docs/batch-resources.md). On by default, as koordlet's hook
    is; it acts only with the kubelet source on.

    `on_creation`: watch the BE tier (inotify) and put a new pod's limits in place as its cgroup is made;
    `resync_s`: the periodic pass over every BE pod (koordlet's reconciler: 10 s); `cfs_quota`: `auto` gives
    BE pods no CFS quota of their own while suppression caps the BE tier by a quota (koordlet's rule), `on`
    always, `off` never. `yarn`: each live YARN container's memory limit from its NodeManager allocation
    (on v1 a memory cgroup mirrored from the cpu one, as yarn-copilot's `--sync-memory-cgroup` does) and
    `hadoop-yarn`'s shares from Σ vcores × 1024 (with the YARN source on); `yarn_cpu_quota`: a CFS quota of
    vcores too (off: YARN containers share the tier by their shares, as LinuxContainerExecutor's
    non-strict mode does). `tier_memory`: a cap on the whole BE tier's memory from the node's batch-memory
    budget (the ledger's batch allocatable): `off`, `high` (memory.high = budget; the soft limit on v1) or
    `high+max` (memory.high = budget × `tier_memory_high_percent`, memory.max = budget); see
    docs/batch-resources.md for the measurement behind the default."""

    enabled: bool = True  # set BE pods' batch limits on their cgroups
    on_creation: bool = True
    resync_s: float = bounded(10.0, 1.0, 600.0)
    cfs_quota: Literal["auto", "on", "off"] = "auto"
    yarn: bool = True
    yarn_cpu_quota: bool = False
    tier_memory: Literal["off", "high", "high+max"] = "off"
    # memory.high as a percent of the budget, under tier_memory high+max
    tier_memory_high_percent: float = bounded(90.0, 0.0, 100.0, low_open=True)

    def __post_init__(self) -> None:
        check_choices(self, "batch_limits", ConfigError)
        check_bounds(self, "batch_limits", ConfigError)
