"""The disk guard's `/metrics` families, from the snapshot's `IoSample` (none while the guard is off)."""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from qos.model import IoRate, IoSample, Workload

_DIRS = ("read", "write")


def _rates(name: str, text: str, unit: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, f"{text} ({unit}), over the guard's window.",
                             labels=["device", "direction"])


def _add(bps: GaugeMetricFamily, ios: GaugeMetricFamily, dev: str, r: IoRate) -> None:
    for d, b, i in zip(_DIRS, (r.rbps, r.wbps), (r.riops, r.wiops), strict=True):
        bps.add_metric([dev, d], b)
        ios.add_metric([dev, d], i)


def io_families(io: IoSample | None) -> list[Metric]:
    """HP's and BE's IO per guarded disk, BE's caps in force, HP's IO pressure."""
    if io is None:
        return []
    hp_b = _rates("coloc_io_hp_bytes_per_second", "IO of the HP workloads per disk", "bytes/s")
    hp_i = _rates("coloc_io_hp_ios_per_second", "IO of the HP workloads per disk", "IOs/s")
    be_b = _rates("coloc_io_be_bytes_per_second", "IO of the BE tier per disk (YARN's containers included)",
                  "bytes/s")
    be_i = _rates("coloc_io_be_ios_per_second", "IO of the BE tier per disk", "IOs/s")
    cap_b = GaugeMetricFamily("coloc_io_be_cap_bytes_per_second",
                              "BE tier's cap per disk as the kernel holds it (+Inf: none).",
                              labels=["device", "direction"])
    cap_i = GaugeMetricFamily("coloc_io_be_cap_ios_per_second",
                              "BE tier's IOPS cap per disk as the kernel holds it (+Inf: none).",
                              labels=["device", "direction"])
    idle = GaugeMetricFamily("coloc_io_hp_idle_seconds", "Seconds since HP last did IO on the disk.",
                             labels=["device"])
    for d in io.disks:
        if d.hp is not None:
            _add(hp_b, hp_i, d.dev, d.hp)
        if d.be is not None:
            _add(be_b, be_i, d.dev, d.be)
        if d.cap is not None:
            c = d.cap
            for direction, b, i in zip(_DIRS, (c.rbps, c.wbps), (c.riops, c.wiops), strict=True):
                cap_b.add_metric([d.dev, direction], math.inf if b is None else b)
                cap_i.add_metric([d.dev, direction], math.inf if i is None else i)
        if d.hp_idle_s is not None:
            idle.add_metric([d.dev], d.hp_idle_s)
    wakes = CounterMetricFamily("coloc_io_guard_wakeups", "Ticks the disk guard woke (HP began waiting for "
                                "IO, or went idle on a capped disk) since start.")
    wakes.add_metric([], io.wakeups)
    notes = GaugeMetricFamily("coloc_io_config_notes", "Parts of the disk QoS configuration (the NodeSLO's "
                              "blkioQOS) the agent does not act on; `coloc-agent status` names them.")
    notes.add_metric([], len(io.notes))
    out: list[Metric] = [hp_b, hp_i, be_b, be_i, cap_b, cap_i, idle, wakes, notes]
    if io.hp_stall_percent is not None:
        stall = GaugeMetricFamily("coloc_io_hp_stall_ratio",
                                  "Share of the guard's window the worst HP cgroup waited for IO "
                                  "(io.pressure 'some'; 0-1).")
        stall.add_metric([], io.hp_stall_percent / 100)
        out.append(stall)
    return out


def workload_io(io: IoSample | None, workloads: tuple[Workload, ...], top_n: int,
                labels: Callable[[Workload], tuple[str, ...]]) -> list[Metric]:
    """The top-N workloads by IO on the guarded disks over the last tick."""
    if io is None or top_n == 0:
        return []
    fam = GaugeMetricFamily("coloc_workload_io_bytes_per_second",
                            "IO (read + written) on the guarded disks of the top-N workloads by IO "
                            "(N = metrics.top_n), over the last tick.",
                            labels=["namespace", "name", "source", "tier"])
    busy = sorted(((r.bps, w.key, w) for w in workloads if (r := io.by_workload.get(w.key)) is not None
                   and r.bps > 0), key=lambda t: (-t[0], t[1]))
    seen: set[tuple[str, ...]] = set()
    for bps, _, w in busy[:top_n]:
        key = labels(w)
        if key not in seen:
            seen.add(key)
            fam.add_metric(list(key), bps)
    return [fam]
