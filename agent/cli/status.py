"""`coloc-agent status [--socket PATH | --config FILE] [--json]`: node, lifecycle, ledger, last actions,
over the agent's read socket (`--config`: the one the agent's config file names, api.socket_path)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import grpc
from google.protobuf import json_format

from agent.api import convert
from agent.api.client import AgentCallError, AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.cli.target import add_config_option, no_agent, resolve, socket_state
from agent.config.api import DEFAULT_SOCKET
from agent.config.load import ConfigError


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f}Gi"


def _when(unix_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix_ms / 1000))


_SINCE = {
    pb.LIFECYCLE_RECOVERING: "since this incarnation started at {}; new batch work is refused until then",
    pb.LIFECYCLE_DECOMMISSIONING: "since the drain started at {}",
}


def _lifecycle_lines(st: pb.Status) -> list[str]:
    """What the lifecycle waits for, how long it has, and whether a scheduler is expected at all."""
    lines = []
    if st.waiting_for:
        since = _SINCE.get(st.node.lifecycle, "since {}").format(_when(st.waiting_since_unix_ms))
        lines.append(f"waiting     for {st.waiting_for} for {st.waiting_s:.1f}s, {since}")
    if not st.awaits_scheduler_ack:
        lines.append("scheduler   none configured (standalone; state.await_scheduler_ack): "
                     "schedulable from the start, no AckRecovery awaited")
    return lines


def _override_lines(st: pb.Status) -> list[str]:
    """Knobs another writer changed and the agent put back: which, by whom if known, how long off."""
    lines = ["overridden  (knobs another writer changed; re-asserted)"] if st.knob_overrides else []
    for o in st.knob_overrides:
        off = f"off ≤ {o.off_for_s:.1f}s" if o.has_off_for else "off for ?"
        lines.append(f"  {_when(o.at_unix_ms)} {o.knob:12} {o.cgroup}  by {o.writer}: "
                     f"found {o.found}, wanted {o.wanted}, {off}")
    return lines


def _source_lines(st: pb.Status) -> list[str]:
    """Each source's age and, when its data is not trusted (nothing is evicted on it), why."""
    if not st.sources:
        return ["sources     none reported yet (no tick published)"] if not st.tick else []
    lines = ["sources"]
    for s in st.sources:
        age = f"age {s.age_s:.1f}s" if s.has_age else "age -"
        lines.append(f"  {s.name:12} {age:12} " + (f"STALE  {s.reason}" if s.stale else "fresh"))
    return lines


def _settings_lines(st: pb.Status) -> list[str]:
    """Each policy setting Koordinator's NodeSLO can set: its value in force and where it came from."""
    if not st.settings:
        return []
    return ["settings", *(f"  {s.name:40} {s.value or '-':10} {s.source}" for s in st.settings)]


def _mib(n: int) -> str:
    return "max" if n < 0 else f"{n / (1 << 20):.1f}Mi"


def _cgroup_parts(c: pb.CgroupLimits, w: pb.WorkloadLimits) -> list[str]:
    """One cgroup's limits, each group with its source: "(NodeSLO)", "(yaml)", "(spec)", "(annotation)"."""
    parts = []
    if c.has_batch:
        cpu = "unlimited" if c.cfs_quota_us < 0 else f"{c.cfs_quota_us / 100_000:.2f} cores"
        parts.append(f"cpu {cpu}, shares {c.cpu_shares}, memory "
                     f"{'unlimited' if c.memory_limit_bytes < 0 else _mib(c.memory_limit_bytes)}"
                     f" ({w.batch_source})")
    if c.has_memory_qos:
        high = f" high {_mib(c.memory_high_bytes)}" if c.level == "container" else ""
        parts.append(f"memory min {_mib(c.memory_min_bytes)} low {_mib(c.memory_low_bytes)}{high}"
                     f" ({w.memory_qos_source})")
    if c.has_cpu_burst:
        parts.append(f"burst {c.cpu_burst_us / 1000:g}ms ({w.cpu_burst_source})")
    return parts


def _limits_lines(st: pb.Status) -> list[str]:
    """Each pod's limits held on its cgroups (batch limits, memory QoS, CPU burst) and each one's source."""
    if not st.enforced_limits:
        return []
    lines = ["limits      (held on each pod's and container's cgroup; each value's source in parentheses)"]
    for w in st.enforced_limits:
        lines.append(f"  {w.pod}" + (f"  {w.key}" if w.key else ""))
        for c in w.cgroups:
            lines += [f"    {c.level:9} {c.cgroup}", "      " + "; ".join(_cgroup_parts(c, w))]
    return lines


def render(st: pb.Status) -> str:
    node, ident = st.node, st.identity
    lifecycle = pb.Lifecycle.Name(node.lifecycle).removeprefix("LIFECYCLE_")
    lines = [
        f"node        {ident.node_id}   incarnation {ident.incarnation}   restarts {ident.restarts}",
        f"lifecycle   {lifecycle}   revision {st.revision}   highest scheduler epoch "
        f"{node.highest_scheduler_epoch}   acked epoch {node.acked_epoch} at revision {node.acked_revision}",
        *_lifecycle_lines(st),
        f"capacity    {node.capacity.milli_cpu} milli-CPU, {_gib(node.capacity.memory_bytes)}",
        f"batch       allocatable {node.batch_allocatable.milli_cpu} milli-CPU, "
        f"{_gib(node.batch_allocatable.memory_bytes)}; allocated {st.batch_allocated.milli_cpu} milli-CPU, "
        f"{_gib(st.batch_allocated.memory_bytes)}",
    ]
    if node.drain.phase not in (pb.DRAIN_PHASE_UNSPECIFIED, pb.DRAIN_PHASE_NONE):
        deadline = _when(node.drain.deadline_unix_ms) if node.drain.has_deadline else "none"
        lines.append(f"drain       {pb.DrainPhase.Name(node.drain.phase).removeprefix('DRAIN_PHASE_')}"
                     f"   deadline {deadline}")
    lines.append(f"ledger      {st.applications} applications; watchers {st.watchers} "
                 f"(dropped {st.dropped_watchers})" + ("; STATE NOT YET SAVED" if st.state_unsaved else ""))
    for c in st.allocations:
        lines.append(f"  {pb.Source.Name(c.source).removeprefix('SOURCE_').lower():6} "
                     f"{pb.Phase.Name(c.phase).removeprefix('PHASE_'):15} {c.count:6}  "
                     f"{c.resources.milli_cpu} milli-CPU, {_gib(c.resources.memory_bytes)}")
    if st.startup_problem:
        lines.append(f"startup     {st.startup_problem}")
    if st.tick:
        lines.append(f"loop        tick {st.tick}, {st.tick_age_s:.1f}s ago"
                     + (f", fast path {st.fast_path_mode}" if st.fast_path_mode else "")
                     + (f" ({st.fast_path_reason})" if st.fast_path_reason else ""))
    if st.not_ready_reason:
        lines.append(f"NOT READY   {st.not_ready_reason}")
    lines += _source_lines(st)
    lines += _settings_lines(st)
    lines += _limits_lines(st)
    lines += _override_lines(st)
    lines += _disk_lines(st)
    egress = [a for a in st.recent_actions if a.kind == "set_be_egress_ceiling"]
    if egress:  # BE egress control is on: its last ceiling (bits/s) and why
        lines.append(f"egress      BE ceiling {int(egress[-1].target) / 1e6:.1f} Mbit/s "
                     f"({egress[-1].outcome}: {egress[-1].reason})")
    if st.recent_actions:
        lines.append("last actions")
        lines += [f"  {_when(a.at_unix_ms)} {a.policy:12} {a.kind:14} {a.target:30} {a.outcome:8} {a.reason}"
                  for a in st.recent_actions]
    if st.recent_notices:
        lines.append("last notices")
        lines += [f"  {_when(e.notice.at_unix_ms)} rev {e.revision:<6} {e.notice.kind:12} {e.notice.message}"
                  for e in st.recent_notices]
    return "\n".join(lines)


def _disk_lines(st: pb.Status) -> list[str]:
    """Each guarded disk: HP's and BE's IO, BE's caps, and who uses the disk most."""
    def mb(v: float) -> str:
        return f"{v / 1e6:.1f}"

    def cap(bps: int, ios: int) -> str:
        if bps < 0 and ios < 0:
            return "none"
        return f"{'-' if bps < 0 else mb(bps)} MB/s {'-' if ios < 0 else ios} IO/s"

    out = []
    for d in st.disks:
        if not d.has_rates:
            out.append(f"disk {d.device:7} no rates yet")
            continue
        stall = "" if d.hp_io_stall_percent < 0 else f", waits {d.hp_io_stall_percent:.0f}%"
        out.append(f"disk {d.device:7} HP {mb(d.hp_read_bytes_per_s)}/{mb(d.hp_write_bytes_per_s)} MB/s r/w "
                   f"{d.hp_ios_per_s:.0f} IO/s{stall}; BE {mb(d.be_read_bytes_per_s)}/"
                   f"{mb(d.be_write_bytes_per_s)} MB/s r/w {d.be_ios_per_s:.0f} IO/s; BE allowed read "
                   f"{cap(d.cap_read_bytes_per_s, d.cap_read_ios_per_s)}, write "
                   f"{cap(d.cap_write_bytes_per_s, d.cap_write_ios_per_s)}")
    out += [f"  disk QoS not acted on: {n}" for n in st.disk_notes]
    if st.disks and st.disks[0].top:
        out.append("  disk users " + ", ".join(f"{u.name} ({'BE' if u.be else 'HP'}) {mb(u.bytes_per_s)} MB/s"
                                               for u in st.disks[0].top))
    return out


async def fetch(address: str, recent: int, timeout: float) -> pb.Status:
    async with AgentClient(address) as client:
        return await client.status(recent=recent, timeout=timeout)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="coloc-agent status", description=__doc__.split("\n\n")[0])
    p.add_argument("--socket",
                   help=f"agent socket path (relative or absolute), unix:PATH or host:port "
                        f"(default: the --config file's api.socket_path, else {DEFAULT_SOCKET})")
    add_config_option(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--recent", type=int, default=10, help="how many recent actions and notices (default 10)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for the agent's answer (default 5)")
    args = p.parse_args(argv)
    try:
        socket = resolve(args.socket, None, args.config).socket
    except ConfigError as err:
        print(f"coloc-agent status: {err}", file=sys.stderr)
        return 2
    if socket is None:
        print(f"coloc-agent status: {args.config} serves no read socket (api.socket_path: null); "
              "pass --socket", file=sys.stderr)
        return 2
    try:
        st = asyncio.run(fetch(socket, args.recent, args.timeout))
    except AgentCallError as err:
        if err.code == grpc.StatusCode.UNAVAILABLE:
            print(f"coloc-agent status: {no_agent(socket, socket_state(socket))}", file=sys.stderr)
        else:
            print(f"coloc-agent status: {err}", file=sys.stderr)
        return 1
    if args.json:
        data: dict[str, Any] = json_format.MessageToDict(st, preserving_proto_field_name=True)
        data["lifecycle"] = convert.LIFECYCLE_FROM_PB[st.node.lifecycle].value
        print(json.dumps(data, indent=1))
    else:
        print(render(st))
    return 0
