"""`coloc-agent top`: a live terminal view of one agent, from its `/metrics` endpoint and its gRPC socket.

Shows the usage by scope and QoS tier, the BE budget, the batch ledger, sources, eviction counters, the
latest actions and the heaviest workloads. The node record, allocations and the latest actions (with their
targets) come from the gRPC `GetStatus` call when the socket is there, else from `/metrics` alone.
`--once` prints one frame and exits (scripts, tests). `--config FILE` finds both from the agent's config
file (api.socket_path, metrics.bind and metrics.port).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from agent.cli.target import POINT_TOP, add_config_option, no_agent, resolve
from agent.config.load import ConfigError
from agent.config.metrics import DEFAULT_PORT

DEFAULT_SOCKET = "/var/run/coloc-agent/agent.sock"  # the API server's default (agent.api.server)


class NoAnswer(OSError):
    """Nothing answers at the metrics URL: no agent runs there."""


@dataclass
class MetricsView:
    """Samples by sample name (`coloc_evictions_total`, ...), each a list of (labels, value)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> MetricsView:
        view = cls()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                view.samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
        return view

    def value(self, name: str, **labels: str) -> float | None:
        for have, v in self.samples.get(name, []):
            if all(have.get(k) == want for k, want in labels.items()):
                return v
        return None

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return list(self.samples.get(name, []))


def fetch(url: str, timeout: float = 5.0) -> str:
    """GET the metrics text; raise OSError with the URL on any failure."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain; version=0.0.4"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body: bytes = resp.read()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, ConnectionRefusedError | TimeoutError):
            why = "connection refused" if isinstance(reason, ConnectionRefusedError) else "timed out"
            raise NoAnswer(no_agent(url, why, POINT_TOP)) from err
        raise OSError(f"cannot read {url}: {reason}") from err
    return body.decode("utf-8", "replace")


@dataclass(frozen=True)
class ApiAction:
    at: float
    policy: str
    kind: str
    target: str
    outcome: str
    reason: str


@dataclass(frozen=True)
class ApiStatus:
    """What `top` shows from the gRPC `GetStatus` answer."""

    address: str
    node_id: str
    incarnation: str
    restarts: int
    revision: int
    lifecycle: str
    drain_deadline: float | None
    batch_allocatable: tuple[int, int]  # milli-cpu, bytes
    batch_allocated: tuple[int, int]
    allocations: tuple[tuple[str, str, int], ...]  # (source, phase, count)
    actions: tuple[ApiAction, ...]
    watchers: int
    problem: str


def read_api(address: str, timeout: float = 5.0) -> ApiStatus:
    """Call GetStatus on the agent's socket; raise OSError naming the address on any failure."""
    try:
        from agent.api.client import AgentClient
        from agent.api.coloc.v1 import agent_pb2 as pb
    except ImportError as err:  # the gRPC API is optional for `top`
        raise OSError(f"gRPC client not available: {err}") from err

    async def call() -> pb.Status:
        async with AgentClient(address) as client:
            return await client.status(recent=8, timeout=timeout)

    try:
        st = asyncio.run(call())
    except Exception as err:
        raise OSError(f"cannot read {address}: {err}") from err

    def name(enum: object, value: int, prefix: str) -> str:
        return str(enum.Name(value)).removeprefix(prefix).lower()  # type: ignore[attr-defined]

    node, drain = st.node, st.node.drain
    return ApiStatus(
        address=address,
        node_id=st.identity.node_id,
        incarnation=st.identity.incarnation,
        restarts=st.identity.restarts,
        revision=st.revision,
        lifecycle=name(pb.Lifecycle, node.lifecycle, "LIFECYCLE_"),
        drain_deadline=drain.deadline_unix_ms / 1000 if drain.has_deadline else None,
        batch_allocatable=(node.batch_allocatable.milli_cpu, node.batch_allocatable.memory_bytes),
        batch_allocated=(st.batch_allocated.milli_cpu, st.batch_allocated.memory_bytes),
        allocations=tuple(
            (name(pb.Source, c.source, "SOURCE_"), name(pb.Phase, c.phase, "PHASE_"), c.count)
            for c in st.allocations
        ),
        actions=tuple(
            ApiAction(a.at_unix_ms / 1000, a.policy, a.kind, a.target, a.outcome, a.reason)
            for a in st.recent_actions
        ),
        watchers=st.watchers,
        problem=st.startup_problem,
    )


def _cores(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}B"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    rows = [list(r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def render(
    view: MetricsView, source: str, now: float | None = None, api: ApiStatus | str | None = None
) -> str:
    """One frame as text. `api` is the gRPC status, or a note saying why there is none."""
    now = time.time() if now is None else now
    out = [_headline(view, source), *_node(view, api, now), ""]
    out += _scopes(view)
    out.append("")
    out += _tiers(view)
    out.append("")
    out += _budget(view)
    out += _limits(view)
    out += _resource_qos(view)
    out += _ledger(view, api)
    out += _counters(view)
    out.append("")
    out += _actions(view, api, now)
    return _workloads(view, out)


def _headline(view: MetricsView, source: str) -> str:
    v = view.value
    ticks = v("coloc_ticks_total")
    age = v("coloc_loop_tick_age_seconds")
    interval = v("coloc_tick_interval_seconds")
    version = next((lab.get("version", "?") for lab, _ in view.series("coloc_build_info")), "?")
    head = f"coloc-agent {version}  {source}  ticks {0 if ticks is None else int(ticks)}"
    if age is not None and interval is not None:
        head += f"  last {age:.1f}s ago (every {interval:g}s)"
    head += "  synced" if v("coloc_sources_synced") == 1 else "  NOT SYNCED"
    if v("coloc_dry_run") == 1:
        head += "  DRY-RUN"
    return head


def _node(view: MetricsView, api: ApiStatus | str | None, now: float) -> list[str]:
    """Lifecycle, ledger revision and drain deadline: from GetStatus when there, else from /metrics."""
    if isinstance(api, ApiStatus):
        line = f"node {api.node_id}  lifecycle {api.lifecycle}  ledger rev {api.revision}"
        line += f"  incarnation {api.incarnation[:8]} (restarts {api.restarts})  watchers {api.watchers}"
        deadline: float | None = api.drain_deadline
    else:
        state = next(
            (lab["state"] for lab, val in view.series("coloc_node_lifecycle_state") if val == 1), "-"
        )
        line = f"lifecycle {state}"
        rev = view.value("coloc_ledger_revision")
        if rev is not None:
            line += f"  ledger rev {int(rev)}"
        deadline = view.value("coloc_node_drain_deadline_timestamp_seconds")
    if deadline is not None:
        line += f"  drain deadline in {deadline - now:.0f}s"
    out = [line]
    if isinstance(api, str):
        out.append(f"api: {api}; node and ledger figures from /metrics only")
    elif api is not None and api.problem:
        out.append(f"api: startup problem: {api.problem}")
    return out


def _scopes(view: MetricsView) -> list[str]:
    v = view.value
    cap_cpu, cap_mem = v("coloc_node_cpu_capacity_cores"), v("coloc_node_memory_capacity_bytes")
    rows = [
        [
            scope,
            _cores(v("coloc_cpu_usage_cores", scope=scope)),
            _bytes(v("coloc_memory_working_set_bytes", scope=scope)),
            _pct(v("coloc_cpu_throttled_ratio", scope=scope)),
        ]
        for scope in ("node", "hp", "be", "system")
    ]
    out = _table(
        [f"SCOPE (cap {_cores(cap_cpu)} cores, {_bytes(cap_mem)})", "CPU", "MEMORY", "THROTTLED"], rows
    )
    psi = v("coloc_hp_cpu_pressure_some_ratio")
    if psi is not None:
        out.append(f"HP cpu pressure (some, over the last window) {_pct(psi)}")
    return out


def _tiers(view: MetricsView) -> list[str]:
    v = view.value
    rows = []
    for tier in ("guaranteed", "burstable", "besteffort"):
        n = sum(val for lab, val in view.series("coloc_workloads") if lab.get("tier") == tier)
        rows.append(
            [
                tier,
                f"{n:.0f}",
                _cores(v("coloc_tier_cpu_usage_cores", tier=tier)),
                _cores(v("coloc_tier_cpu_requests_cores", tier=tier)),
                _bytes(v("coloc_tier_memory_working_set_bytes", tier=tier)),
                _bytes(v("coloc_tier_memory_requests_bytes", tier=tier)),
            ]
        )
    return _table(["TIER", "WORKLOADS", "CPU", "CPU REQ", "MEMORY", "MEM REQ"], rows)


def _budget(view: MetricsView) -> list[str]:
    """The BE knobs as granted, and the batch budget the two schedulers share."""
    v = view.value
    granted = view.series("coloc_be_cpu_granted_cores")
    policy = granted[0][0].get("policy", "-") if granted else "-"
    idle = v("coloc_be_cpu_idle")
    return [
        f"BE budget  policy {policy}  granted {_cores(granted[0][1] if granted else None)} cores"
        f"  floor {_cores(v('coloc_be_cpu_floor_cores'))}"
        f"  cpuset {_cores(v('coloc_be_cpuset_cpus')).removesuffix('.00')} cpus"
        f"  quota {_cores(v('coloc_be_cpu_quota_cores'))}"
        f"  cpu.idle {'-' if idle is None else ('on' if idle else 'off')}"
        f"  memory.high {_bytes(v('coloc_be_memory_high_bytes'))}",
        f"batch      origin {_cores(v('coloc_batch_origin_cpu_cores'))} cores"
        f" / {_bytes(v('coloc_batch_origin_memory_bytes'))}"
        f"  k8s {_cores(v('coloc_batch_requested_cpu_cores', scheduler='k8s'))}"
        f" / {_bytes(v('coloc_batch_requested_memory_bytes', scheduler='k8s'))}"
        f"  yarn {_cores(v('coloc_batch_requested_cpu_cores', scheduler='yarn'))}"
        f" / {_bytes(v('coloc_batch_requested_memory_bytes', scheduler='yarn'))}"
        f"  overcommit {_cores(v('coloc_batch_overcommit_cpu_cores'))}"
        f" / {_bytes(v('coloc_batch_overcommit_memory_bytes'))}",
        *_egress(view),
        *_disks(view),
    ]


def _limits(view: MetricsView) -> list[str]:
    """Each BE pod's and container's batch limits, and each YARN container's, as enforced (when any are)."""
    rows: dict[tuple[str, str, str], dict[str, float | str]] = {}
    for name, key in (("coloc_batch_limit_cpu_cores", "cpu"), ("coloc_batch_limit_cpu_shares", "shares"),
                      ("coloc_batch_limit_memory_bytes", "memory")):
        for lab, val in view.series(name):
            row = rows.setdefault((lab.get("pod", "?"), lab.get("level", "?"), lab.get("cgroup", "?")), {})
            row[key], row["source"] = val, lab.get("source", "-")
    for name, key in (("coloc_yarn_limit_cpu_cores", "cpu"), ("coloc_yarn_limit_memory_bytes", "memory")):
        for lab, val in view.series(name):
            row = rows.setdefault((lab.get("container", "?"), "yarn", "-"), {})
            row[key], row["source"] = val, "nodemanager"
    if not rows:
        return []

    def cap(v: float | str | None, show: Callable[[float | None], str]) -> str:
        if not isinstance(v, float | int):
            return "-"
        return "unlimited" if v < 0 else show(float(v))
    table = [[who, level, cap(r.get("cpu"), _cores), "-" if "shares" not in r else f"{r['shares']:.0f}",
              cap(r.get("memory"), _bytes), str(r.get("source", "-"))]
             for (who, level, _), r in sorted(rows.items())]
    on_creation = view.value("coloc_batch_limits_on_creation")
    when = "" if on_creation is None else (
        "  (placed at creation)" if on_creation else "  (periodic pass only)")
    return ["", f"batch limits{when}",
            *_table(["POD / CONTAINER", "LEVEL", "CPU", "SHARES", "MEMORY", "SOURCE"], table), ""]


def _resource_qos(view: MetricsView) -> list[str]:
    """Each pod's and container's memory QoS (min, low, high) and CPU burst in place, with their sources
    (NodeSLO or yaml), when any are."""
    rows: dict[tuple[str, str, str], dict[str, float | str]] = {}
    for name, key in (("coloc_memory_qos_min_bytes", "min"), ("coloc_memory_qos_low_bytes", "low"),
                      ("coloc_memory_qos_high_bytes", "high"), ("coloc_cpu_burst_us", "burst")):
        for lab, val in view.series(name):
            row = rows.setdefault((lab.get("pod", "?"), lab.get("level", "?"), lab.get("cgroup", "?")), {})
            row[key] = val
            row["memory source" if key != "burst" else "burst source"] = lab.get("source", "-")
    if not rows:
        return []

    def mem(v: float | str | None) -> str:
        if not isinstance(v, float | int):
            return "-"
        return "max" if v < 0 else _bytes(float(v))
    table = [[who, level, mem(r.get("min")), mem(r.get("low")), mem(r.get("high")),
              "-" if "burst" not in r else f"{float(r['burst']) / 1000:g}ms",
              str(r.get("memory source", "-")), str(r.get("burst source", "-"))]
             for (who, level, _), r in sorted(rows.items())]
    return ["memory QoS and CPU burst",
            *_table(["POD / CONTAINER", "LEVEL", "MIN", "LOW", "HIGH", "BURST", "MEMORY FROM", "BURST FROM"],
                    table), ""]


def _egress(view: MetricsView) -> list[str]:
    """BE egress control, when it is on: the BE ceiling, the classes' rates, the link."""
    v = view.value
    link = v("coloc_network_link_bits_per_second")
    if link is None:
        return []

    def mbit(x: float | None) -> str:
        return "-" if x is None else f"{x / 1e6:.1f}"
    shaping = "shaping" if v("coloc_network_shaping") else "NOT shaping (root qdisc not ours)"
    return [f"egress     link {mbit(link)} Mbit/s"
            f"  BE ceiling {mbit(v('coloc_network_be_ceiling_bits_per_second'))}"
            f"  HP {mbit(v('coloc_network_hp_egress_bits_per_second'))}"
            f"  BE {mbit(v('coloc_network_be_egress_bits_per_second'))}"
            f"  changes {v('coloc_network_be_ceiling_changes_total') or 0:.0f}  {shaping}"]


def _disks(view: MetricsView) -> list[str]:
    """The disk guard, when it runs: per disk HP's and BE's IO and BE's cap (write; read where it differs)."""
    v = view.value
    devices = sorted({lab["device"] for lab, _ in view.series("coloc_io_be_cap_bytes_per_second")})

    def mb(x: float | None) -> str:
        return "-" if x is None else ("none" if math.isinf(x) else f"{x / 1e6:.1f}")

    out = []
    for dev in devices:
        def rate(name: str, d: str = dev) -> float:
            return sum(v(name, device=d, direction=x) or 0.0 for x in ("read", "write"))
        stall = v("coloc_io_hp_stall_ratio")
        cap = "coloc_io_be_cap_bytes_per_second"
        out.append(f"disk       {dev}  HP {mb(rate('coloc_io_hp_bytes_per_second'))} MB/s"
                   f" {rate('coloc_io_hp_ios_per_second'):.0f} IO/s"
                   + ("" if stall is None else f" (waits {100 * stall:.0f}%)")
                   + f"  BE {mb(rate('coloc_io_be_bytes_per_second'))} MB/s"
                   f"  BE cap write {mb(v(cap, device=dev, direction='write'))}"
                   f" read {mb(v(cap, device=dev, direction='read'))} MB/s")
    return out


def _ledger(view: MetricsView, api: ApiStatus | str | None) -> list[str]:
    """Ledger allocations (GetStatus when there, else /metrics) and the age of each source."""
    out = []
    if isinstance(api, ApiStatus):
        (ac, am), (uc, um) = api.batch_allocatable, api.batch_allocated
        out.append(
            f"ledger     allocatable {ac / 1000:.2f} cores / {_bytes(am)}"
            f"  allocated {uc / 1000:.2f} / {_bytes(um)}"
        )
        allocs = [f"{src}/{phase} {n}" for src, phase, n in api.allocations]
    else:
        series = view.series("coloc_ledger_allocations")
        allocs = [f"{lab['source']}/{lab['phase']} {val:.0f}" for lab, val in series]
    if allocs:
        out.append("allocations " + "  ".join(allocs))
    sources = []
    for lab, val in view.series("coloc_source_sample_age_seconds"):
        stale = view.value("coloc_source_stale", source=lab["source"]) == 1
        sources.append(f"{lab['source']} {val:.1f}s" + (" STALE" if stale else ""))
    out.append("sources    " + ("  ".join(sources) or "-"))
    out.append("")
    return out


def _counters(view: MetricsView) -> list[str]:
    def nonzero(name: str, keys: Sequence[str]) -> str:
        parts = [f"{'/'.join(lab[k] for k in keys)} {val:.0f}" for lab, val in view.series(name) if val > 0]
        return "  ".join(parts) or "0"

    writes, werr = view.value("coloc_cgroup_writes_total"), view.value("coloc_cgroup_write_errors_total")
    return [
        "evictions  " + nonzero("coloc_evictions_total", ("reason", "source")),
        "failures   " + nonzero("coloc_eviction_failures_total", ("reason",)),
        "holds      " + nonzero("coloc_holds_total", ("policy", "reason")),
        "refused    " + nonzero("coloc_admissions_refused_total", ("reason",)),
        f"cgroup writes {_cores(writes).removesuffix('.00')}  errors {_cores(werr).removesuffix('.00')}",
    ]


def _actions(view: MetricsView, api: ApiStatus | str | None, now: float) -> list[str]:
    """Recent actions one by one from GetStatus; else the latest of each kind with its count."""
    if isinstance(api, ApiStatus):
        rows = [
            [f"{max(0.0, now - a.at):.0f}s ago", a.policy, a.kind, a.target, a.outcome, a.reason]
            for a in sorted(api.actions, key=lambda a: -a.at)
        ]
        out = _table(["WHEN", "POLICY", "ACTION", "TARGET", "OUTCOME", "REASON"], rows) if rows else []
        out.append("" if rows else "actions    none yet\n")
        return out
    counts = {tuple(sorted(lab.items())): val for lab, val in view.series("coloc_actions_total")}
    recent = sorted(view.series("coloc_last_action_timestamp_seconds"), key=lambda s: -s[1])[:8]
    rows = [
        [
            f"{max(0.0, now - at):.0f}s ago",
            lab["policy"],
            lab["kind"],
            lab["outcome"],
            f"{counts.get(tuple(sorted(lab.items())), 0):.0f}",
        ]
        for lab, at in recent
    ]
    if not rows:
        return ["actions    none yet", ""]
    return [*_table(["LATEST", "POLICY", "ACTION", "OUTCOME", "COUNT"], rows), ""]


def _workloads(view: MetricsView, out: list[str]) -> str:
    top = sorted(view.series("coloc_workload_cpu_usage_cores"), key=lambda s: -s[1])
    rows = [
        [lab["namespace"] or "-", lab["name"], lab["source"], lab["tier"], _cores(val)] for lab, val in top
    ]
    if rows:
        out += _table(["NAMESPACE", "WORKLOAD", "SOURCE", "TIER", "CPU"], rows)
    return "\n".join(out) + "\n"


def _metrics_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else url + "/metrics"


def _api(socket: str, timeout: float) -> ApiStatus | str | None:
    """The gRPC status, a note saying why there is none, or None when the API is turned off."""
    if socket.lower() in ("", "none"):
        return None
    path = socket.removeprefix("unix://").removeprefix("unix:")
    if path.startswith("/") and not os.path.exists(path):
        return f"socket {path} is not there"
    try:
        return read_api(socket, timeout)
    except OSError as err:
        return str(err)


def _frame(url: str, socket: str, timeout: float) -> str:
    view = MetricsView.parse(fetch(url, timeout))
    return render(view, url, api=_api(socket, timeout))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coloc-agent top", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        help=f"agent metrics endpoint (default: the --config file's metrics.bind and metrics.port, else "
             f"http://127.0.0.1:{DEFAULT_PORT})",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between frames (default 2)")
    parser.add_argument(
        "--socket",
        help="agent gRPC socket or host:port for GetStatus; 'none' for /metrics only (default: the --config "
             f"file's api.socket_path, else {DEFAULT_SOCKET})",
    )
    add_config_option(parser)
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument("--timeout", type=float, default=5.0, help="HTTP and gRPC timeout in seconds")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.interval <= 0:
        print("coloc-agent top: --interval must be > 0", file=sys.stderr)
        return 2
    try:
        target = resolve(args.socket, args.url, args.config)
    except ConfigError as err:
        print(f"coloc-agent top: {err}", file=sys.stderr)
        return 2
    if target.url is None:
        print(f"coloc-agent top: {target.no_metrics}", file=sys.stderr)
        return 2
    url, socket = _metrics_url(target.url), target.socket or "none"
    if args.once:
        try:
            frame = _frame(url, socket, args.timeout)
        except (OSError, ValueError) as err:
            print(f"coloc-agent top: {err}", file=sys.stderr)
            return 1
        sys.stdout.write(frame)
        return 0
    try:
        while True:
            try:
                frame = _frame(url, socket, args.timeout)
            except (OSError, ValueError) as err:
                frame = f"coloc-agent top: {err}\n"
            sys.stdout.write("\x1b[H\x1b[2J" + frame)
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
