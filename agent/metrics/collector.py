"""The Prometheus collector: every `coloc_` series built at scrape time from the latest `Published`.

It runs in the HTTP server's threads, so it reads only immutable data: the `Published` on the board, the
ledger view the ledger hands out, and the hub's own locked tallies. Each section is built whole before any
of it is yielded; a section that raises is left out and counted in `coloc_collector_errors_total`, so one
bad figure never turns the scrape into an HTTP 500.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.metrics.io import io_families, workload_io
from agent.metrics.ledger import LIFECYCLE_STATES, LedgerFigures, ledger_figures
from agent.metrics.tally import OTHER, ActionTally
from agent.published import Board, Counters, Published
from agent.sources.fetch_errors import FETCH_ERRORS
from qos.actions import EvictReason, HoldReason
from qos.model import NodeSnapshot, Resources, Source, Tier, Usage, Workload

log = logging.getLogger("coloc.metrics")

LedgerView = Callable[[], object | None]
Section = Callable[[Published | None, LedgerFigures | None], Iterable[Metric]]

K = TypeVar("K", bound=tuple[str, ...])

LABEL_VALUE_MAX = 64


def _cores(milli: float) -> float:
    return milli / 1000.0


def _label(value: object) -> str:
    text = str(value)
    return text if len(text) <= LABEL_VALUE_MAX else text[: LABEL_VALUE_MAX - 1] + "~"


def fold(counts: Mapping[K, float], limit: int) -> dict[tuple[str, ...], float]:
    """Keep the `limit` largest label sets and sum the rest under `other` (at most limit + 1 series)."""
    labelled = ((tuple(_label(v) for v in k), n) for k, n in counts.items())
    items = sorted(labelled, key=lambda kv: (-kv[1], kv[0]))
    kept: dict[tuple[str, ...], float] = {}
    for key, n in items[:limit]:
        kept[key] = kept.get(key, 0) + n
    if len(items) > limit:
        other = (OTHER,) * len(items[0][0])
        kept[other] = kept.get(other, 0) + sum(n for _, n in items[limit:])
    return kept


class ErrorTally:
    """Counts of collector sections that failed, by section name."""

    def __init__(self, sections: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(sections, 0)

    def inc(self, section: str) -> None:
        with self._lock:
            self._counts[section] = self._counts.get(section, 0) + 1

    def get(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class ColocCollector(Collector):
    """Builds the `coloc_` families from the board (and the ledger view where there is one)."""

    SECTIONS = (
        "agent",
        "loop",
        "node",
        "tiers",
        "be",
        "network",
        "io",
        "batch",
        "ledger",
        "sources",
        "counters",
        "actions",
        "workloads",
    )

    def __init__(
        self,
        board: Board,
        *,
        version: str,
        top_n: int,
        max_label_values: int,
        actions: ActionTally,
        ledger_view: LedgerView | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._board = board
        self._version = version
        self._top_n = top_n
        self._limit = max_label_values
        self._actions = actions
        self._ledger_view = ledger_view
        self._clock = clock
        self.errors = ErrorTally((*self.SECTIONS, "ledger_view"))
        self._ledger_failing = False

    def collect(self) -> Iterator[Metric]:
        published = self._board.get()
        ledger = self._read_ledger()
        sections: dict[str, Section] = {
            "agent": self._agent,
            "loop": self._loop,
            "node": self._node,
            "tiers": self._tiers,
            "be": self._be,
            "network": self._network,
            "io": self._io,
            "batch": self._batch,
            "ledger": self._ledger,
            "sources": self._sources,
            "counters": self._counters,
            "actions": self._action_families,
            "workloads": self._workloads,
        }
        for name, section in sections.items():
            try:
                families = list(section(published, ledger))
            except Exception:
                self.errors.inc(name)
                log.exception("metrics section %s failed; left out of this scrape", name)
                continue
            yield from families
        errors = CounterMetricFamily(
            "coloc_collector_errors",
            "Collector sections that failed and were left out of a scrape.",
            labels=["section"],
        )
        for name, n in sorted(self.errors.get().items()):
            errors.add_metric([name], n)
        yield errors

    def _read_ledger(self) -> LedgerFigures | None:
        if self._ledger_view is None:
            return None
        try:
            view = self._ledger_view()
            figures = None if view is None else ledger_figures(view)
        except Exception:
            self.errors.inc("ledger_view")  # every scrape; said at the first of a run of failures
            if not self._ledger_failing:
                log.exception("ledger view failed; ledger series left out of scrapes until it reads again")
            self._ledger_failing = True
            return None
        self._ledger_failing = False
        return figures

    # -- sections -------------------------------------------------------------------------------------

    def _agent(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        info = GaugeMetricFamily("coloc_build_info", "Always 1; the agent's version.", labels=["version"])
        info.add_metric([self._version], 1)
        synced = GaugeMetricFamily(
            "coloc_sources_synced", "1 when every source has delivered a first sample."
        )
        synced.add_metric([], 1 if p is not None and p.sources_synced else 0)
        out: list[Metric] = [info, synced]
        if p is not None:
            dry = GaugeMetricFamily(
                "coloc_dry_run", "1 when actions are logged and counted but not carried out."
            )
            dry.add_metric([], 1 if p.dry_run else 0)
            out.append(dry)
        return out

    def _loop(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        ticks = CounterMetricFamily("coloc_ticks", "Loop ticks since the agent started.")
        errors = CounterMetricFamily("coloc_tick_errors", "Loop ticks that ended in an error.")
        ticks.add_metric([], p.counters.ticks if p else 0)
        errors.add_metric([], p.counters.tick_errors if p else 0)
        if p is None:
            return [ticks, errors]
        interval = GaugeMetricFamily("coloc_tick_interval_seconds", "Configured loop interval.")
        interval.add_metric([], p.interval_s)
        last = GaugeMetricFamily(
            "coloc_last_tick_timestamp_seconds", "Wall-clock time at which the latest published tick started."
        )
        last.add_metric([], p.tick_started_at)
        age = GaugeMetricFamily(
            "coloc_loop_tick_age_seconds",
            "Seconds since the latest published tick started (monotonic clock).",
        )
        age.add_metric([], max(0.0, self._clock() - p.tick_monotonic))
        mode = GaugeMetricFamily(
            "coloc_fast_path_mode", "1 for the way the loop's fast path is woken now, 0 for the others.",
            labels=["mode"])
        for m in ("psi-trigger", "adaptive-poll", "off"):
            mode.add_metric([m], 1 if p.fast_path_mode == m else 0)
        return [ticks, errors, interval, last, age, mode]

    def _node(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        snap = p.snapshot if p else None
        if snap is None:
            return []
        cap_cpu = GaugeMetricFamily(
            "coloc_node_cpu_capacity_cores", "CPU capacity of the node the agent manages."
        )
        cap_cpu.add_metric([], _cores(snap.capacity.milli_cpu))
        cap_mem = GaugeMetricFamily(
            "coloc_node_memory_capacity_bytes", "Memory capacity of the managed node."
        )
        cap_mem.add_metric([], snap.capacity.memory_bytes)
        cpus = GaugeMetricFamily("coloc_node_cpus", "CPUs the node's cpuset holds.")
        cpus.add_metric([], len(snap.cpus))
        taken = GaugeMetricFamily(
            "coloc_snapshot_timestamp_seconds", "Wall-clock time of the latest snapshot."
        )
        taken.add_metric([], snap.taken_at)
        cpu = GaugeMetricFamily(
            "coloc_cpu_usage_cores", "CPU used by scope: node, hp, be, system.", labels=["scope"]
        )
        mem = GaugeMetricFamily(
            "coloc_memory_working_set_bytes",
            "Memory working set by scope: node, hp, be, system.",
            labels=["scope"],
        )
        thr = GaugeMetricFamily(
            "coloc_cpu_throttled_ratio",
            "Share of CFS periods throttled over the last window, by scope.",
            labels=["scope"],
        )
        scopes: dict[str, Usage] = {
            "node": snap.node_usage,
            "hp": snap.hp_usage,
            "be": snap.be_usage,
            "system": snap.system_usage,
        }
        for scope, usage in scopes.items():
            if usage.milli_cpu is not None:
                cpu.add_metric([scope], _cores(usage.milli_cpu))
            if usage.memory_working_set_bytes is not None:
                mem.add_metric([scope], usage.memory_working_set_bytes)
            if usage.cpu_throttled_ratio is not None:
                thr.add_metric([scope], usage.cpu_throttled_ratio)
        out: list[Metric] = [cap_cpu, cap_mem, cpus, taken, cpu, mem, thr]
        if snap.hp_cpu_pressure_some_avg10 is not None:
            psi = GaugeMetricFamily(
                "coloc_hp_cpu_pressure_some_ratio",
                "Share (0-1) of the last collection window in which some HP task waited for a CPU "
                "(PSI cpu 'some' stall counter; the worst HP workload; not the kernel's avg10).",
            )
            # The snapshot field keeps its historical name; the value is the windowed stall share.
            psi.add_metric([], snap.hp_cpu_pressure_some_avg10 / 100.0)
            out.append(psi)
        return out

    def _tiers(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        snap = p.snapshot if p else None
        if snap is None:
            return []
        cpu: dict[str, float] = {t.value: 0.0 for t in Tier}
        mem: dict[str, float] = {t.value: 0.0 for t in Tier}
        req_cpu: dict[str, float] = {t.value: 0.0 for t in Tier}
        req_mem: dict[str, float] = {t.value: 0.0 for t in Tier}
        count: dict[tuple[str, str], int] = {(t.value, s.value): 0 for t in Tier for s in Source}
        for w in snap.workloads:
            tier = w.tier.value
            cpu[tier] += w.usage.milli_cpu or 0.0
            mem[tier] += w.usage.memory_working_set_bytes or 0
            req_cpu[tier] += w.requests.milli_cpu
            req_mem[tier] += w.requests.memory_bytes
            count[(tier, w.source.value)] += 1
        fams = (
            GaugeMetricFamily(
                "coloc_tier_cpu_usage_cores", "CPU used by the workloads of a QoS tier.", labels=["tier"]
            ),
            GaugeMetricFamily(
                "coloc_tier_memory_working_set_bytes",
                "Memory working set of a QoS tier's workloads.",
                labels=["tier"],
            ),
            GaugeMetricFamily(
                "coloc_tier_cpu_requests_cores", "CPU requested by a QoS tier's workloads.", labels=["tier"]
            ),
            GaugeMetricFamily(
                "coloc_tier_memory_requests_bytes",
                "Memory requested by a QoS tier's workloads.",
                labels=["tier"],
            ),
        )
        for fam, values, scale in zip(
            fams, (cpu, mem, req_cpu, req_mem), (1e-3, 1.0, 1e-3, 1.0), strict=True
        ):
            for tier, v in values.items():
                fam.add_metric([tier], v * scale)
        workloads = GaugeMetricFamily(
            "coloc_workloads",
            "Workloads on the node by QoS tier and by who placed them.",
            labels=["tier", "source"],
        )
        for (tier, source), n in count.items():
            workloads.add_metric([tier, source], n)
        return [*fams, workloads]

    def _be(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        if p is None:
            return []
        out: list[Metric] = []
        if p.be_cpu_granted_milli is not None:
            granted = GaugeMetricFamily(
                "coloc_be_cpu_granted_cores",
                "CPU that suppression currently lets the BE tier use, by policy.",
                labels=["policy"],
            )
            granted.add_metric([_label(p.be_cpu_policy or "none")], _cores(p.be_cpu_granted_milli))
            out.append(granted)
        floor = getattr(p, "be_cpu_floor_milli", None)
        if floor is not None:
            fl = GaugeMetricFamily(
                "coloc_be_cpu_floor_cores", "The least CPU suppression leaves the BE tier."
            )
            fl.add_metric([], _cores(floor))
            out.append(fl)
        snap = p.snapshot
        if snap is None:
            return out
        tier = snap.be_tier
        if tier.cpuset:
            cpuset = GaugeMetricFamily("coloc_be_cpuset_cpus", "CPUs in the BE tier's cpuset.")
            cpuset.add_metric([], len(tier.cpuset))
            out.append(cpuset)
        if tier.quota_milli_cpu is not None:
            quota = GaugeMetricFamily("coloc_be_cpu_quota_cores", "CFS quota on the BE tier, in cores.")
            quota.add_metric([], _cores(tier.quota_milli_cpu))
            out.append(quota)
        if tier.cpu_idle is not None:
            idle = GaugeMetricFamily("coloc_be_cpu_idle", "1 when the BE tier runs in SCHED_IDLE (cpu.idle).")
            idle.add_metric([], 1 if tier.cpu_idle else 0)
            out.append(idle)
        if tier.memory_high_bytes is not None:
            high = GaugeMetricFamily(
                "coloc_be_memory_high_bytes", "memory.high (or soft limit) of the BE tier."
            )
            high.add_metric([], tier.memory_high_bytes)
            out.append(high)
        return out

    def _network(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        """BE egress control: the link, the BE class's ceiling, both classes' rates, ceiling changes."""
        net = p.snapshot.network if p is not None and p.snapshot is not None else None
        if net is None:
            return []
        out: list[Metric] = []
        for name, text, value in (
            ("coloc_network_link_bits_per_second", "Configured egress link capacity.", net.link_bps),
            ("coloc_network_be_ceiling_bits_per_second", "Ceiling of the BE egress class (HTB ceil).",
             net.be_ceil_bps),
            ("coloc_network_be_rate_bits_per_second", "Guaranteed rate of the BE egress class (HTB rate).",
             net.be_rate_bps),
            ("coloc_network_hp_egress_bits_per_second", "HP egress rate over the last interval.", net.hp_bps),
            ("coloc_network_be_egress_bits_per_second", "BE egress rate over the last interval.", net.be_bps),
        ):
            if value is not None:
                g = GaugeMetricFamily(name, text)
                g.add_metric([], float(value))
                out.append(g)
        owned = GaugeMetricFamily("coloc_network_shaping", "1 while the egress root qdisc is the agent's.")
        owned.add_metric([], 1 if net.owned else 0)
        sources = GaugeMetricFamily("coloc_network_be_sources", "Source addresses classified BE.")
        sources.add_metric([], len(net.classified))
        changes = CounterMetricFamily("coloc_network_be_ceiling_changes",
                                      "BE egress ceiling changes applied since start.")
        changes.add_metric([], net.ceiling_changes)
        return [*out, owned, sources, changes]

    def _io(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        """The disk guard: HP's and BE's IO per disk, BE's caps, HP's IO pressure, the busiest workloads."""
        snap = p.snapshot if p is not None else None
        if snap is None:
            return []
        return [*io_families(snap.io), *workload_io(snap.io, snap.workloads, self._top_n, _workload_labels)]

    def _batch(self, p: Published | None, ledger: LedgerFigures | None) -> Iterable[Metric]:
        snap = p.snapshot if p else None
        k8s = ledger.k8s_requested if ledger else None
        yarn = ledger.yarn_requested if ledger else None
        if snap is not None:
            k8s = k8s if k8s is not None else _requested(snap, Source.K8S)
            yarn = yarn if yarn is not None else _requested(snap, Source.YARN)
        out: list[Metric] = []
        if k8s is not None or yarn is not None:
            req_cpu = GaugeMetricFamily(
                "coloc_batch_requested_cpu_cores",
                "Batch CPU requested on the node, by scheduler (k8s, yarn).",
                labels=["scheduler"],
            )
            req_mem = GaugeMetricFamily(
                "coloc_batch_requested_memory_bytes",
                "Batch memory requested on the node, by scheduler.",
                labels=["scheduler"],
            )
            for name, res in (("k8s", k8s), ("yarn", yarn)):
                if res is not None:
                    req_cpu.add_metric([name], _cores(res.milli_cpu))
                    req_mem.add_metric([name], res.memory_bytes)
            out += [req_cpu, req_mem]
        origin = ledger.batch_origin if ledger else None
        if origin is None:
            return out
        o_cpu = GaugeMetricFamily(
            "coloc_batch_origin_cpu_cores", "Batch CPU the node offers (origin_batch_total)."
        )
        o_cpu.add_metric([], _cores(origin.milli_cpu))
        o_mem = GaugeMetricFamily("coloc_batch_origin_memory_bytes", "Batch memory the node offers.")
        o_mem.add_metric([], origin.memory_bytes)
        out += [o_cpu, o_mem]
        if k8s is not None and yarn is not None:
            used = k8s + yarn
            over_cpu = GaugeMetricFamily(
                "coloc_batch_overcommit_cpu_cores", "Batch CPU requested beyond the origin (0 when within)."
            )
            over_cpu.add_metric([], _cores(max(0, used.milli_cpu - origin.milli_cpu)))
            over_mem = GaugeMetricFamily(
                "coloc_batch_overcommit_memory_bytes",
                "Batch memory requested beyond the origin (0 when within).",
            )
            over_mem.add_metric([], max(0, used.memory_bytes - origin.memory_bytes))
            out += [over_cpu, over_mem]
        return out

    def _ledger(self, _: Published | None, ledger: LedgerFigures | None) -> Iterable[Metric]:
        if ledger is None:
            return []
        out: list[Metric] = []
        if ledger.revision is not None:
            rev = GaugeMetricFamily("coloc_ledger_revision", "Revision of the state ledger.")
            rev.add_metric([], ledger.revision)
            out.append(rev)
        if ledger.lifecycle is not None:
            state = GaugeMetricFamily(
                "coloc_node_lifecycle_state",
                "1 for the node's current lifecycle state, 0 for the others.",
                labels=["state"],
            )
            states = list(LIFECYCLE_STATES)
            if ledger.lifecycle not in states:
                states.append(_label(ledger.lifecycle))
            for s in states:
                state.add_metric([s], 1 if s == ledger.lifecycle else 0)
            out.append(state)
        if ledger.drain_deadline is not None:
            deadline = GaugeMetricFamily(
                "coloc_node_drain_deadline_timestamp_seconds", "Wall-clock deadline of the current drain."
            )
            deadline.add_metric([], ledger.drain_deadline)
            out.append(deadline)
        if ledger.drain_allocations_left is not None:
            left = GaugeMetricFamily(
                "coloc_node_drain_allocations_left",
                "Allocations still on the node while it is decommissioning (finished containers excluded).",
            )
            left.add_metric([], ledger.drain_allocations_left)
            out.append(left)
        if ledger.allocations or ledger.revision is not None:
            allocs = GaugeMetricFamily(
                "coloc_ledger_allocations",
                "Allocations in the ledger by source and phase.",
                labels=["source", "phase"],
            )
            for key, n in sorted(fold(ledger.allocations, self._limit).items()):
                allocs.add_metric(list(key), n)
            out.append(allocs)
        return out

    def _sources(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        if p is None:
            return []
        stale = dict(p.snapshot.stale) if p.snapshot else {}
        names = sorted(set(p.source_age_s) | set(stale))[: self._limit]
        age = GaugeMetricFamily(
            "coloc_source_sample_age_seconds", "Age of the latest sample from each source.", labels=["source"]
        )
        flag = GaugeMetricFamily(
            "coloc_source_stale",
            "1 when a source's data is stale or missing (eviction is held).",
            labels=["source"],
        )
        for name in names:
            if name in p.source_age_s:
                age.add_metric([_label(name)], p.source_age_s[name])
            flag.add_metric([_label(name)], 1 if name in stale else 0)
        errors = CounterMetricFamily(
            "coloc_source_fetch_errors",
            "Failed fetches of a remote source, by kind (too_large, garbage, down, timeout, …).",
            labels=["source", "kind"],
        )
        for (source, kind), n in sorted(FETCH_ERRORS.get().items())[: self._limit]:
            errors.add_metric([_label(source), _label(kind)], n)
        return [age, flag, errors]

    def _counters(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        c = p.counters if p else None
        evictions = CounterMetricFamily(
            "coloc_evictions",
            "Workloads evicted or killed, by reason and by source (k8s, yarn, local).",
            labels=["reason", "source"],
        )
        ev: dict[tuple[str, ...], float] = {(r.value, s.value): 0 for r in EvictReason for s in Source}
        if c:
            ev.update({tuple(k): n for k, n in c.evictions.items()})
        for key, n in sorted(fold(ev, max(self._limit, len(EvictReason) * len(Source))).items()):
            evictions.add_metric(list(key), n)
        failures = CounterMetricFamily(
            "coloc_eviction_failures", "Evictions or kills that failed, by reason.", labels=["reason"]
        )
        fa: dict[tuple[str, ...], float] = {(r.value,): 0 for r in EvictReason}
        if c:
            fa.update({(k,): n for k, n in c.eviction_failures.items()})
        for key, n in sorted(fold(fa, max(self._limit, len(EvictReason))).items()):
            failures.add_metric(list(key), n)
        holds = CounterMetricFamily(
            "coloc_holds",
            "Times a policy wanted to act and held back, by policy and reason.",
            labels=["policy", "reason"],
        )
        refused = CounterMetricFamily(
            "coloc_admissions_refused", "Batch admissions refused, by reason.", labels=["reason"]
        )
        if c:  # (policy, code): both a fixed set, so every pair is exported, none folded
            for (policy, code), n in sorted(c.holds.items()):
                holds.add_metric([_label(policy), str(code)], n)
            for key, n in sorted(
                fold({(k,): v for k, v in c.admissions_refused.items()}, self._limit).items()
            ):
                refused.add_metric(list(key), n)
        # The executor counts a refused protected target as a hold with reason "protected"; every policy
        # starts at 0 so that `increase(...) > 0` alerts on the first one.
        protected = CounterMetricFamily(
            "coloc_protected_refusals",
            "Evictions refused because the target is protected (a classification bug), by policy.",
            labels=["policy"],
        )
        pr: dict[tuple[str, ...], float] = {(r.value,): 0 for r in EvictReason}
        if c:
            for (policy, why), n in c.holds.items():
                if why == HoldReason.PROTECTED:
                    pr[(policy,)] = pr.get((policy,), 0) + n
        for key, n in sorted(fold(pr, max(self._limit, len(EvictReason))).items()):
            protected.add_metric(list(key), n)
        writes = CounterMetricFamily("coloc_cgroup_writes", "cgroup files written.")
        writes.add_metric([], c.cgroup_writes if c else 0)
        write_errors = CounterMetricFamily("coloc_cgroup_write_errors", "cgroup writes that failed.")
        write_errors.add_metric([], c.cgroup_write_errors if c else 0)
        return [evictions, failures, holds, refused, protected, writes, write_errors,
                *self._coexistence_families(p)]

    @staticmethod
    def _coexistence_families(p: Published | None) -> list[Metric]:
        """Knobs another writer changed (re-asserted), and knobs held through systemd (coexistence docs)."""
        c = p.counters if p is not None else None
        overrides = CounterMetricFamily(
            "coloc_knob_overrides", "Knobs the agent holds that another writer changed (then re-asserted), "
            "by knob and writer (systemd, unknown).", labels=["knob", "writer"])
        for (knob, writer), n in sorted((c.knob_overrides if c else {}).items()):
            overrides.add_metric([knob, writer], n)
        off = GaugeMetricFamily("coloc_knob_override_off_seconds",
                                "How long the latest override of each knob left it off, at most.",
                                labels=["knob"])
        latest = {o.knob: o for o in (p.knob_overrides if p is not None else ()) if o.off_for_s is not None}
        for knob, o in sorted(latest.items()):
            off.add_metric([knob], o.off_for_s or 0.0)
        sets = CounterMetricFamily("coloc_systemd_property_sets",
                                   "Knobs also set as a systemd unit's runtime property (systemd driver).")
        sets.add_metric([], c.systemd_sets if c else 0)
        errors = CounterMetricFamily("coloc_systemd_errors",
                                     "systemd calls that failed (the cgroup file alone was written).")
        errors.add_metric([], c.systemd_errors if c else 0)
        return [overrides, off, sets, errors, *_holding_families(c)]

    def _action_families(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        tally = self._actions.get()
        total = CounterMetricFamily(
            "coloc_actions",
            "Actions carried out (or not), by policy, kind and outcome.",
            labels=["policy", "kind", "outcome"],
        )
        last = GaugeMetricFamily(
            "coloc_last_action_timestamp_seconds",
            "Wall-clock time of the latest action by policy, kind, outcome.",
            labels=["policy", "kind", "outcome"],
        )
        counts = fold({k: v[0] for k, v in tally.items()}, self._limit)
        for key, n in sorted(counts.items()):
            total.add_metric(list(key), n)
            if key in tally:
                last.add_metric(list(key), tally[key][1])
        out: list[Metric] = [total, last]
        if p is not None:
            pending = GaugeMetricFamily(
                "coloc_pending_actions", "Actions decided but not yet carried out, by kind.", labels=["kind"]
            )
            kinds: dict[tuple[str, ...], float] = {}
            for action in p.pending_actions:
                key = (type(action).__name__,)
                kinds[key] = kinds.get(key, 0) + 1
            for key, n in sorted(fold(kinds, self._limit).items()):
                pending.add_metric(list(key), n)
            out.append(pending)
        return out

    def _workloads(self, p: Published | None, _: LedgerFigures | None) -> Iterable[Metric]:
        snap = p.snapshot if p else None
        if snap is None or self._top_n == 0:
            return []
        labels = ["namespace", "name", "source", "tier"]
        cpu = GaugeMetricFamily(
            "coloc_workload_cpu_usage_cores",
            "CPU used by the top-N workloads by CPU (N = metrics.top_n).",
            labels=labels,
        )
        mem = GaugeMetricFamily(
            "coloc_workload_memory_working_set_bytes",
            "Memory working set of the top-N workloads by memory (N = metrics.top_n).",
            labels=labels,
        )
        by_cpu = _top(snap.workloads, self._top_n, lambda w: w.usage.milli_cpu)
        by_mem = _top(snap.workloads, self._top_n, lambda w: w.usage.memory_working_set_bytes)
        seen: set[tuple[str, ...]] = set()
        for w in by_cpu:
            key = _workload_labels(w)
            if key not in seen:
                seen.add(key)
                cpu.add_metric(list(key), _cores(w.usage.milli_cpu or 0.0))
        seen.clear()
        for w in by_mem:
            key = _workload_labels(w)
            if key not in seen:
                seen.add(key)
                mem.add_metric(list(key), w.usage.memory_working_set_bytes or 0)
        return [cpu, mem]


def _requested(snap: NodeSnapshot, source: Source) -> Resources:
    total = Resources()
    for w in snap.workloads:
        if w.be and w.source is source:
            total = total + w.requests
    return total


def _top(
    workloads: Iterable[Workload], n: int, value: Callable[[Workload], float | int | None]
) -> list[Workload]:
    known = [(v, w.key, w) for w in workloads if (v := value(w)) is not None and math.isfinite(v)]
    known.sort(key=lambda t: (-t[0], t[1]))
    return [w for _, _, w in known[:n]]


def _workload_labels(w: Workload) -> tuple[str, ...]:
    return (_label(w.namespace), _label(w.name), w.source.value, w.tier.value)


def _holding_families(c: Counters | None) -> list[Metric]:
    """The journal of holdings (cgroups/holdings.py): its writes (none at a steady tick), what each holder
    holds, what an earlier run held that was given back or left to another writer."""
    writes = CounterMetricFamily("coloc_holdings_journal_writes",
                                 "Times the journal of what the agent holds on the node was written.")
    writes.add_metric([], c.journal_writes if c else 0)
    held = GaugeMetricFamily("coloc_holdings", "Knobs the agent holds, by holder.", labels=["holder"])
    given = CounterMetricFamily("coloc_holdings_given_back",
                                "Knobs an earlier run held that this run gave back, by holder.",
                                labels=["holder"])
    left = CounterMetricFamily("coloc_holdings_left", "Knobs an earlier run held that another writer changed "
                               "since: left as they were, by knob and writer.", labels=["knob", "writer"])
    if c is not None:
        for holder, n in sorted(c.holdings.items()):
            held.add_metric([holder], n)
        for holder, n in sorted(c.given_back.items()):
            given.add_metric([holder], n)
        for (knob, writer), n in sorted(c.left_to_others.items()):
            left.add_metric([knob, writer], n)
    return [writes, held, given, left]
