"""Write memory QoS (qos/memory_qos.py) and CPU burst (qos/cpu_burst.py) plans through the one writer.

`memory.min` / `memory.low` go through systemd on a unit (MemoryMin / MemoryLow) as well as to the file;
`memory.high` as MemoryHigh; the burst is a file write (systemd has no property for it, and never writes the
file). A cgroup this executor held that no plan names any more (the pod went, the class was turned off, the
feature was turned off) gets the kernel's defaults back: min 0, low 0, high "max", burst 0.
The executor decides nothing: it carries out plans and remembers what it has put in place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from agent.executors.batch_limits import Enforced
from cgroups.errors import CgroupError, CgroupGone
from cgroups.holdings import Holder
from cgroups.writer import CgroupWriter
from qos.cpu_burst import CpuBurstPlan
from qos.memory_qos import MemoryQosPlan, MemoryValues

log = logging.getLogger("coloc.resource_qos")
MEMORY_QOS = Holder("memory_qos", together=True)  # the kubelet's MemoryQoS gate writes min and high too
CPU_BURST = Holder("cpu_burst")


def _default(v: MemoryValues) -> bool:
    return v.min_bytes == 0 and v.low_bytes == 0 and v.high_bytes is None


class ResourceQosExecutor:
    """Holds what it put in place, per cgroup and per pod (read by status and /metrics)."""

    def __init__(self, writer: CgroupWriter) -> None:
        self._writer = writer
        self.memory: dict[str, MemoryValues] = {}
        self.burst: dict[str, int] = {}
        self.memory_pods: dict[str, tuple[MemoryValues, ...]] = {}
        self.burst_pods: dict[str, tuple[tuple[str, int], ...]] = {}
        self.errors: dict[str, str] = {}  # cgroup -> why its values are not in place (latest pass)
        self.writes = 0
        self.restores = 0

    def held_memory(self) -> dict[str, tuple[MemoryValues, ...]]:
        """Per pod name, its pod's and containers' values in place now, those that are not the kernel's
        defaults (a class turned off holds 0 / "max")."""
        out = {}
        for name, values in self.memory_pods.items():
            held = tuple(v for v in values if v.rel in self.memory and not _default(v))
            if held:
                out[name] = held
        return out

    def held_burst(self) -> dict[str, tuple[tuple[str, str, int], ...]]:
        """Per pod name, its pod's and containers' bursts in place now, those above 0: (level, cgroup, µs)."""
        out = {}
        for name, values in self.burst_pods.items():
            held = tuple(("container" if i else "pod", rel, b) for i, (rel, b) in enumerate(values)
                         if b > 0 and self.burst.get(rel) == b)
            if held:
                out[name] = held
        return out

    def _exists(self, ctrl: str, rel: str) -> bool:
        return os.path.isdir(self._writer.path(ctrl, rel))

    def _memory_one(self, v: MemoryValues) -> bool:
        wrote = self._writer.set_memory_protection(v.rel, v.min_bytes, v.low_bytes)
        if v.sets_high:
            wrote = self._writer.set_memory_high(v.rel, v.high_bytes) or wrote
        return wrote

    @staticmethod
    def _wanted_memory(plan: MemoryQosPlan | None, tiers: dict[str, str]) -> dict[str, MemoryValues]:
        """The values `plan` puts in place by cgroup, tiers first; `tiers` maps its tier names to cgroups."""
        wanted: dict[str, MemoryValues] = {}
        if plan is not None:
            for name, (mn, low) in plan.tiers.items():
                if name in tiers:
                    wanted[tiers[name]] = MemoryValues(tiers[name], mn, low)
            wanted.update((v.rel, v) for v in plan.cgroups)
        return wanted

    def apply_memory(self, plan: MemoryQosPlan | None, tiers: dict[str, str]) -> int:
        """Put `plan` in place (None: hold nothing); `tiers` maps the plan's tier names to cgroups."""
        with self._writer.held_by(MEMORY_QOS):
            return self._apply_memory(plan, tiers)

    def _apply_memory(self, plan: MemoryQosPlan | None, tiers: dict[str, str]) -> int:
        wanted = self._wanted_memory(plan, tiers)
        written = 0
        for rel, v in wanted.items():  # tiers first: top-down, as koordlet's leveled update
            try:
                if not self._exists("memory", rel):
                    continue
                written += self._memory_one(v)
                self.memory[rel] = v
                self.errors.pop(rel, None)
            except CgroupGone:
                continue
            except CgroupError as err:
                self._error(rel, str(err))
        for rel in sorted(set(self.memory) - set(wanted), key=lambda r: -r.count("/")):
            held = self.memory.pop(rel)
            self._restore(rel, lambda r, h=held: self._memory_one(MemoryValues(r, 0, 0, None, h.sets_high)))
        self.memory_pods = dict(plan.pods) if plan is not None else {}
        self.writes += written
        return written

    def apply_burst(self, plan: CpuBurstPlan | None) -> int:
        """Put `plan` in place (None: hold nothing)."""
        with self._writer.held_by(CPU_BURST):
            return self._apply_burst(plan)

    def _apply_burst(self, plan: CpuBurstPlan | None) -> int:
        wanted = {v.rel: v.burst_us for v in plan.cgroups} if plan is not None else {}
        written = 0
        # pod before container on growth is not needed: the kernel bounds each by its own quota only
        for rel, burst in wanted.items():
            try:
                if not self._exists("cpu", rel):
                    continue
                written += self._writer.set_cpu_burst(rel, burst)
                self.burst[rel] = burst
                self.errors.pop(rel, None)
            except CgroupGone:
                continue
            except CgroupError as err:
                self._error(rel, str(err))
        for rel in sorted(set(self.burst) - set(wanted)):
            del self.burst[rel]
            self._restore(rel, lambda r: self._writer.set_cpu_burst(r, 0))
        self.burst_pods = ({name: tuple((v.rel, v.burst_us) for v in vs) for name, vs in plan.pods.items()}
                           if plan is not None else {})
        self.writes += written
        return written

    def _restore(self, rel: str, write: object) -> None:
        try:
            if callable(write) and write(rel):
                self.restores += 1
        except CgroupError as err:  # gone meanwhile: nothing to give back
            log.debug("resource QoS not restored", extra={"fields": {"cgroup": rel, "error": str(err)}})
        self.errors.pop(rel, None)

    def _error(self, rel: str, why: str) -> None:
        if self.errors.get(rel) != why:  # said once per cause, not at every pass
            log.warning("resource QoS not in place", extra={"fields": {"cgroup": rel, "error": why}})
        self.errors[rel] = why


@dataclass(frozen=True, slots=True)
class HeldLimits:
    """What the executors hold now, as `status` reads it (their own maps and views, no copy kept): batch
    limits by workload key, memory QoS and CPU burst by pod name, with the settings' sources."""

    batch: Mapping[str, Enforced]
    memory: Mapping[str, tuple[MemoryValues, ...]]
    burst: Mapping[str, tuple[tuple[str, str, int], ...]]
    memory_source: str = ""
    burst_source: str = ""
