"""BE pods' batch limits in place when their cgroup is made, not at the next slow reconcile.

Sources → policy → executor, as every decision: the kubelet's pod list (the same `KubeletSource` the tick
reads, so there is one list of pods) → `qos.batch_limits.plan` (pure) → `BatchLimitsExecutor` (the writer).
Two triggers run that chain:

- **creation** — inotify on the BE tier and on each pod cgroup in it (`cgroups/watch.py`): a pod or
  container cgroup appears → the kubelet's pod list is fetched at once → the pass. A cgroup that is not
  placed yet (the pod list does not name it, a container id not in the status yet, a v1 hierarchy not made
  yet) gets follow-up fetches and passes at `FOLLOW_UP_S` after its creation. While a fetch runs, further
  events coalesce into one more fetch after it.
- **periodic** — a pass every `resync_s` over the latest list (the safety net: a missed event, a value
  another writer changed, a pod the kubelet listed late). Koordlet's reconciler runs every 10 s.

At start the controller fetches the kubelet's pod list itself before its first pass, so the BE pods already
on the node get their limits right after that first list, not a `resync_s` later; if that fetch fails (the
kubelet not up yet), it looks every `UNLISTED_CHECK_S` for the list the sources' own refresh brings and
passes as soon as there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.config.batch_limits import BatchLimitsConfig
from agent.daemon.tier_cap import TierCapRunner
from agent.executors.batch_limits import (
    BatchLimitsExecutor,
    PassReport,
    TierMemoryExecutor,
    YarnLimitsExecutor,
    YarnReport,
)
from agent.sources.kubelet import KubeletSource
from agent.sources.yarn import NodeManagerSource
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from cgroups.watch import DirEvent, DirWatcher
from cgroups.writer import CgroupWriter
from qos.batch_limits import CFS_PERIOD_US, plan, pod_quota_allowed
from qos.suppression import SuppressionConfig
from qos.tier_memory import tier_memory_cap
from qos.yarn_limits import yarn_plan

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("coloc.batch_limits")

FOLLOW_UP_S = (0.02, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0)  # after a creation, while a new cgroup is not placed
UNLISTED_CHECK_S = 0.2  # until the kubelet's first pod list: how often to look whether it came


class BatchLimitsController:
    def __init__(self, kubelet: KubeletSource | None, executor: BatchLimitsExecutor, layout: Layout,
                 dir_of: Callable[[str], str], *, resync_s: float = 10.0, watch: bool = True,
                 cfs_quota: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic,
                 yarn: tuple[NodeManagerSource, YarnLimitsExecutor, bool] | None = None,
                 tier: TierCapRunner | None = None) -> None:
        self._kubelet = kubelet
        self.yarn = yarn  # the NodeManager, the YARN executor, whether containers get a CFS quota too
        self.yarn_last: YarnReport | None = None
        self.tier = tier  # the BE tier's memory cap
        self.executor = executor
        self._layout = layout
        self._dir_of = dir_of  # rel -> absolute directory in the hierarchy watched (cpu)
        self._tier = layout.tier("besteffort")
        self.resync_s = resync_s
        self._watch = watch
        self._cfs_quota = cfs_quota
        self._clock = clock
        self._kick = asyncio.Event()
        self._fresh: dict[str, float] = {}  # new cgroup rel -> when it was seen, for its follow-ups
        self._checked: dict[str, float] = {}  # new cgroup rel -> time its follow-ups are done up to
        self.last: PassReport | None = None
        self.passes = 0
        self.fetches = 0
        self.watching = False

    # -- one pass ----------------------------------------------------------------------------------------

    def pass_once(self, *, changed_only: bool = False, only: set[str] | None = None) -> PassReport:
        """The latest pod list → plans → writes. `changed_only` (a creation): only the pods whose plan is
        not in place yet (a new pod, a new container), so a creation costs the same on a node of 5 or 500
        BE pods; `only`: the pods of these cgroups (a follow-up's check); the periodic pass takes them all."""
        pods = self._kubelet.batch_pods() if self._kubelet is not None else ()
        plans = plan(pods, cfs_quota=self._cfs_quota())
        if changed_only:
            plans = tuple(p for p in plans if not self.executor.holds(p))
        if only is not None:
            plans = tuple(p for p in plans if p.pod is not None and (
                p.pod.rel in only or any(c.rel in only for c in p.containers)))
        whole = not (changed_only or only is not None)
        report = self.executor.apply(plans, restore=whole)
        if whole and (self._kubelet is None or math.isfinite(self._kubelet.workloads().age_s)):
            self.executor.settle()  # a pass over a listed node: what an earlier run held and this one not
        self.last = report
        self.passes += 1
        self._expire()
        return report

    def yarn_pass(self) -> YarnReport | None:
        """The NodeManager's live containers → their limits and `hadoop-yarn`'s shares."""
        if self.yarn is None:
            return None
        source, executor, cpu_quota = self.yarn
        listed = source.workloads()
        self.yarn_last = executor.apply(yarn_plan(listed.workloads, cpu_quota=cpu_quota))
        if math.isfinite(listed.age_s):
            executor.settle()
        return self.yarn_last

    def _placed(self) -> set[str]:
        placed: set[str] = set(self.yarn[1].limited) if self.yarn is not None else set()
        for e in self.executor.enforced.values():
            placed.add(e.pod.rel)
            placed.update(c.rel for c in e.containers)
        return placed

    def _expire(self) -> None:
        """Forget new cgroups past their last follow-up."""
        now = self._clock()
        for rel, seen in list(self._fresh.items()):
            if now - seen > FOLLOW_UP_S[-1]:
                del self._fresh[rel]
                self._checked.pop(rel, None)

    def _due(self) -> set[str]:
        """New cgroups with a follow-up due now (each step once)."""
        now = self._clock()
        due = set()
        for rel, seen in self._fresh.items():
            done = self._checked.get(rel, seen)
            if any(done < seen + step <= now for step in FOLLOW_UP_S):
                due.add(rel)
                self._checked[rel] = now
        return due

    async def fetch_and_pass(self) -> PassReport:
        """A pass over the list at hand first (a pod listed before its cgroup appeared is placed at once),
        then a fresh list and a pass over what is still not in place."""
        kinds = {self._layout.identify(rel).kind for rel in self._fresh}
        if self.yarn is not None and "yarn" in kinds:
            await self.yarn[0].refresh()
            self.yarn_pass()
            if kinds <= {"yarn"}:
                return self.pass_once(changed_only=True)
        if self._fresh:
            self.pass_once(changed_only=True)
        if self._kubelet is None:
            return self.pass_once(changed_only=True)
        await self._kubelet.refresh()
        self.fetches += 1
        return self.pass_once(changed_only=True)

    async def follow_up(self) -> PassReport:
        """After a creation: fetch again while a new cgroup is not placed (its pod or container id may be
        listed now); once placed, check its values again: the kubelet (or runtime) writes a new cgroup's
        shares after making it in every hierarchy, and may do so after ours (then it is put back)."""
        due, placed = self._due(), self._placed()
        report = self.pass_once(only=due & placed)
        if due - placed:
            report = await self.fetch_and_pass()
        return report

    # -- inotify -----------------------------------------------------------------------------------------

    def _rel(self, parent: str, name: str) -> str | None:
        base = self._dir_of("")
        rel = os.path.relpath(os.path.join(parent, name), base)
        return None if rel.startswith("..") else rel

    def _on_events(self, watcher: DirWatcher) -> None:
        for ev in watcher.read():
            self._on_event(watcher, ev)

    def _on_event(self, watcher: DirWatcher, ev: DirEvent) -> None:
        if ev.overflow:
            self._rewatch(watcher)
            self._kick.set()
            return
        rel = self._rel(ev.parent, ev.name)
        if rel is None:
            return
        kind = self._layout.identify(rel).kind
        if kind not in ("pod", "container", "yarn"):
            return
        if not ev.created:
            watcher.unwatch(os.path.join(ev.parent, ev.name))
            self._fresh.pop(rel, None)
            return
        self._fresh[rel] = self._clock()
        if kind == "pod":
            self._watch_dir(watcher, rel)
            for child in self._children(rel):  # made before the watch was: their event is lost
                self._fresh[child] = self._clock()
        self._kick.set()

    def _children(self, rel: str) -> list[str]:
        try:
            with os.scandir(self._dir_of(rel)) as it:
                return [f"{rel}/{e.name}" for e in it if e.is_dir(follow_symlinks=False)]
        except (OSError, CgroupError):
            return []

    def _watch_dir(self, watcher: DirWatcher, rel: str) -> None:
        try:
            watcher.watch(self._dir_of(rel))
        except CgroupError as err:
            log.warning("cannot watch a pod cgroup: its containers get their limits at the periodic pass",
                        extra={"fields": {"cgroup": rel, "error": str(err)}})

    def _rewatch(self, watcher: DirWatcher) -> None:
        """Watch the tier and every pod in it (at start, and after the kernel's queue overflowed)."""
        tier_dir = self._dir_of(self._tier)
        if not watcher.watch(tier_dir):
            return
        if self.yarn is not None:  # a YARN container's cgroup (made by the NodeManager's executor)
            self._watch_dir(watcher, self._layout.yarn_root())
        with contextlib.suppress(OSError):
            with os.scandir(tier_dir) as it:
                names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
            for name in names:
                rel = f"{self._tier}/{name}" if self._tier else name
                if self._layout.identify(rel).kind == "pod":
                    self._watch_dir(watcher, rel)

    def _open_watcher(self) -> DirWatcher | None:
        if not self._watch:
            return None
        try:
            watcher = DirWatcher()
        except CgroupError as err:
            log.warning("no inotify: BE pods get their batch limits at the periodic pass only",
                        extra={"fields": {"error": str(err), "resync_s": self.resync_s}})
            return None
        self._rewatch(watcher)
        return watcher

    # -- the task ------------------------------------------------------------------------------------------

    def _next_follow_up(self) -> float | None:
        """Seconds until the next follow-up of a new cgroup not placed yet (None: none due)."""
        now = self._clock()
        waits = [seen + step - now for rel, seen in self._fresh.items() for step in FOLLOW_UP_S
                 if seen + step > max(now, self._checked.get(rel, seen))]
        return max(0.0, min(waits)) if waits else None

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: a fetch and a pass on each creation, follow-ups, and a pass every `resync_s`."""
        watcher = self._open_watcher()
        loop = asyncio.get_running_loop()
        if watcher is not None:
            loop.add_reader(watcher.fileno(), self._on_events, watcher)
            self.watching = True
        next_pass = self._clock()
        follow_due = False
        listed = False
        try:
            await self._guarded(self._first_list)
            listed = self._listed()
            while not stop.is_set():
                if self._kick.is_set():
                    self._kick.clear()
                    await self._guarded(self.fetch_and_pass)
                elif follow_due:
                    await self._guarded(self.follow_up)
                if not listed and self._listed():  # the first pod list came: the pods on the node now
                    listed, next_pass = True, self._clock()
                if self._clock() >= next_pass:  # on its own clock: a burst of creations does not hold it off
                    await self._guarded(self._pass_async)
                    next_pass = self._clock() + self.resync_s
                until_pass = max(0.0, next_pass - self._clock())
                follow = min(self._next_follow_up() or until_pass, until_pass)
                wait = follow if listed else min(follow, UNLISTED_CHECK_S)
                follow_due = (not await _first(stop, self._kick, wait) and wait == follow
                              and follow < until_pass)
        finally:
            if watcher is not None:
                loop.remove_reader(watcher.fileno())
                watcher.close()
                self.watching = False

    def _listed(self) -> bool:
        """Whether the kubelet has given a pod list yet (no kubelet: nothing to wait for)."""
        return self._kubelet is None or math.isfinite(self._kubelet.workloads().age_s)

    async def _first_list(self) -> None:
        """At start, the kubelet's pod list now (not at the sources' next refresh): the first pass then
        places the BE pods already on the node."""
        if not self._listed():
            assert self._kubelet is not None
            await self._kubelet.refresh()
            self.fetches += 1

    async def _pass_async(self) -> PassReport:
        if self.tier is not None:
            self.tier.pass_once()
        self.yarn_pass()
        return self.pass_once()

    async def _guarded(self, fn: Callable[[], object]) -> None:
        try:
            result = fn()
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("batch limits pass failed")


async def _first(stop: asyncio.Event, kick: asyncio.Event, timeout: float) -> bool:
    """Wait until `stop` or `kick` is set (True), or `timeout` seconds pass (False)."""
    if stop.is_set() or kick.is_set():
        return True
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(kick.wait())]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return bool(done)


def build(cfg: BatchLimitsConfig, kubelet: KubeletSource | None, writer: CgroupWriter, layout: Layout,
          suppression: Callable[[], SuppressionConfig],
          nodemanager: NodeManagerSource | None = None,
          batch_memory: Callable[[], int | None] = lambda: None) -> BatchLimitsController | None:
    """The controller the daemon runs (None when off, or with neither the kubelet nor the NodeManager).
    `suppression` gives the suppression settings in force (the NodeSLO's, else the YAML's). Where no
    controller (or part of it) runs, what an earlier run held for it is given back here, once."""
    yarn = None
    yarn_executor = YarnLimitsExecutor(writer, layout.yarn_root())
    if cfg.yarn and nodemanager is not None:
        yarn = (nodemanager, yarn_executor, cfg.yarn_cpu_quota)
    tier = TierCapRunner(
        TierMemoryExecutor(writer, layout.tier("besteffort")),
        lambda: tier_memory_cap(batch_memory(), cfg.tier_memory, cfg.tier_memory_high_percent))
    executor = BatchLimitsExecutor(writer)
    if not cfg.enabled or (kubelet is None and yarn is None and cfg.tier_memory == "off"):
        tier.executor.settle()
        executor.settle()
        yarn_executor.settle()
        return None
    if yarn is None:
        yarn_executor.settle()
    if kubelet is None:
        executor.settle()

    def cfs_quota() -> bool:
        if cfg.cfs_quota != "auto":
            return cfg.cfs_quota == "on"
        return pod_quota_allowed(suppression())

    if not cfs_quota():
        log.info("BE pods get no CFS quota of their own while the BE tier is suppressed by a quota "
                 "(a v1 parent's quota may not be below a child's); their shares and the tier bound them")
    return BatchLimitsController(kubelet, executor, layout,
                                 lambda rel: writer.path("cpu", rel), resync_s=cfg.resync_s,
                                 watch=cfg.on_creation, cfs_quota=cfs_quota, yarn=yarn,
                                 tier=tier)


MAX_SERIES_PODS = 1000  # per-pod series beyond this many BE pods are left out (the counts still cover all)


class BatchLimitsMetrics:
    """`/metrics` for the batch limits: what each BE pod and container is held to, and the pass counters.
    Unlimited is -1. Registered on the agent's private registry (a prometheus_client custom collector)."""

    def __init__(self, controller: BatchLimitsController) -> None:
        self._ctl = controller

    def describe(self) -> list[object]:
        return []

    def collect(self) -> list[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ctl, ex = self._ctl, self._ctl.executor
        labels = ["pod", "level", "cgroup", "source"]
        shares = GaugeMetricFamily("coloc_batch_limit_cpu_shares", "cpu.shares a BE pod or container is held "
                                   "to (v2: written as cpu.weight).", labels=labels)
        cores = GaugeMetricFamily("coloc_batch_limit_cpu_cores",
                                  "CFS quota of a BE pod or container, in cores (-1: unlimited).",
                                  labels=labels)
        memory = GaugeMetricFamily("coloc_batch_limit_memory_bytes",
                                   "Memory limit of a BE pod or container (-1: unlimited).", labels=labels)
        for e in sorted(ex.enforced.values(), key=lambda e: e.name)[:MAX_SERIES_PODS]:
            for level, lim in (("pod", e.pod), *(("container", c) for c in e.containers)):
                values = [e.name, level, lim.rel, e.source]
                shares.add_metric(values, lim.cpu_shares)
                cores.add_metric(values, -1 if lim.cfs_quota_us is None else lim.cfs_quota_us / CFS_PERIOD_US)
                memory.add_metric(values, -1 if lim.memory_limit_bytes is None else lim.memory_limit_bytes)
        pods = GaugeMetricFamily("coloc_batch_limits_pods", "BE pods by state of their batch limits.",
                                 labels=["state"])
        pods.add_metric(["enforced"], len(ex.enforced))
        pods.add_metric(["pending"], len(ex.errors))
        watching = GaugeMetricFamily("coloc_batch_limits_on_creation",
                                     "1 when new BE pod cgroups are watched (inotify), 0 when only the "
                                     "periodic pass places limits.")
        watching.add_metric([], 1 if ctl.watching else 0)
        out: list[Metric] = [shares, cores, memory, pods, watching, *self._yarn()]
        for name, doc, value in (
                ("coloc_batch_limits_passes", "Batch-limit passes run.", ctl.passes),
                ("coloc_batch_limits_fetches",
                 "Kubelet pod lists fetched because a BE cgroup appeared (and at start).", ctl.fetches),
                ("coloc_batch_limits_writes", "Batch-limit knob writes (unchanged values are not rewritten).",
                 ex.writes),
                ("coloc_batch_limits_restores", "BE pods given the kubelet's values back when they left.",
                 ex.restores)):
            counter = CounterMetricFamily(name, doc)
            counter.add_metric([], value)
            out.append(counter)
        return out

    def _yarn(self) -> list[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        if self._ctl.yarn is None:
            return []
        ex = self._ctl.yarn[1]
        memory = GaugeMetricFamily("coloc_yarn_limit_memory_bytes",
                                   "Memory limit of a YARN container (its NodeManager allocation).",
                                   labels=["container"])
        cores = GaugeMetricFamily("coloc_yarn_limit_cpu_cores", "CFS quota of a YARN container in cores "
                                  "(-1: none; batch_limits.yarn_cpu_quota).", labels=["container"])
        for rel, lim in sorted(ex.limited.items())[:MAX_SERIES_PODS]:
            name = rel.rsplit("/", 1)[-1]
            memory.add_metric([name], lim.memory_limit_bytes)
            cores.add_metric([name], -1 if lim.cfs_quota_us is None else lim.cfs_quota_us / CFS_PERIOD_US)
        shares = GaugeMetricFamily("coloc_yarn_root_cpu_shares",
                                   "cpu.shares of the hadoop-yarn cgroup: Σ live containers' vcores × 1024 "
                                   "(v2: written as cpu.weight; -1 before the first live container).")
        shares.add_metric([], -1 if ex.root_shares is None else ex.root_shares)
        mirrors = GaugeMetricFamily("coloc_yarn_memory_mirrors",
                                    "v1 memory cgroups made for YARN containers the executor made none for.")
        mirrors.add_metric([], len(ex.mirrors))
        return [memory, cores, shares, mirrors]
