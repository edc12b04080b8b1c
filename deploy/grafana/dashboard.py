"""The coloc-agent Grafana dashboard, built with grafana-foundation-sdk (Grafana's own typed builders).

    python deploy/grafana/dashboard.py > deploy/grafana/coloc-agent.json

The JSON beside this file is its output, checked in; tests/deploy/test_deploy_dashboard.py fails when it is
stale and when a query names a metric the agent does not export. Every query selects `job="coloc-agent"`
(the PodMonitor's and the plain scrape config's job) and the `node` label both of them set.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
from grafana_foundation_sdk.builders.dashboard import (
    DashboardLink,
    DatasourceVariable,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import BigValueGraphMode, LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

UID = "coloc-agent"
SEL = 'job="coloc-agent", node=~"$node"'
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

Query = tuple[str, str]  # (PromQL, legend)


def q(expr: str, legend: str = "") -> Query:
    return expr.replace("{SEL", "{" + SEL), legend


def target(i: int, query: Query) -> prometheus.Dataquery:
    expr, legend = query
    t = prometheus.Dataquery().expr(expr).ref_id(chr(ord("A") + i)).datasource(DS)
    return t.legend_format(legend) if legend else t


def series(title: str, unit: str, *queries: Query, description: str = "", width: int = 12,
           stacked: bool = False) -> timeseries.Panel:
    p = (timeseries.Panel().title(title).unit(unit).span(width).height(8).datasource(DS)
         .legend(VizLegendOptions().display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)
                 .show_legend(True)))
    if description:
        p = p.description(description)
    if stacked:
        p = p.fill_opacity(30)
    for i, query in enumerate(queries):
        p = p.with_target(target(i, query))
    return p


def single(title: str, unit: str, query: Query, description: str = "", width: int = 4) -> stat.Panel:
    p = (stat.Panel().title(title).unit(unit).span(width).height(4).datasource(DS)
         .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])).graph_mode(BigValueGraphMode.AREA)
         .with_target(target(0, query)))
    return p.description(description) if description else p


def build() -> Any:
    d = (DashboardBuilder("coloc-agent").uid(UID).tags(["coloc-agent", "kubernetes", "colocation"])
         .description("Batch (BE) co-location on each node: budget against HP use, suppression, evictions, "
                      "the batch ledger, the disk guard and the agent's own cost. Metrics: docs/metrics.md.")
         .time("now-3h", "now").refresh("1m").timezone("browser")
         .link(DashboardLink("Runbooks").type(DashboardLinkType.LINK).target_blank(True)
               .url("https://github.com/coloc-agent/coloc-agent/blob/main/docs/runbooks.md"))
         .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
         .with_variable(QueryVariable("node").label("Node").datasource(DS)
                        .query('label_values(coloc_build_info{job="coloc-agent"}, node)')
                        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
                        .multi(True).include_all(True).all_value(".*")))

    d = (d.with_row(Row("Overview"))
         .with_panel(single("Agents up", "none", q('sum(up{SEL})')))
         .with_panel(single("Sources stale", "none", q("sum(coloc_source_stale{SEL})"),
                            "Sources with no fresh data: every eviction is held on those nodes (alert "
                            "ColocSourceStale)."))
         .with_panel(single("Nodes not schedulable", "none",
                            q('count(coloc_node_lifecycle_state{SEL, state!="schedulable"} == 1) '
                              "or vector(0)")))
         .with_panel(single("Dry run", "none", q("sum(coloc_dry_run{SEL})"),
                            "Agents that log and count their actions but do not carry them out."))
         .with_panel(single("Evictions (range)", "none",
                            q("sum(increase(coloc_evictions_total{SEL}[$__range]))")))
         .with_panel(single("Loop tick age (max)", "s", q("max(coloc_loop_tick_age_seconds{SEL})"),
                            "Above 3 loop intervals the agent is stalled (alert ColocLoopStalled).")))

    d = (d.with_row(Row("BE budget against HP use"))
         .with_panel(series(
             "CPU: HP use, BE use, BE budget", "short",
             q('coloc_cpu_usage_cores{SEL, scope="hp"}', "{{node}} HP used"),
             q('coloc_cpu_usage_cores{SEL, scope="be"}', "{{node}} BE used"),
             q("max without (policy) (coloc_be_cpu_granted_cores{SEL})", "{{node}} BE granted"),
             q("coloc_be_cpu_floor_cores{SEL}", "{{node}} BE floor"),
             q("coloc_node_cpu_capacity_cores{SEL}", "{{node}} capacity"),
             description="Cores. BE granted is what suppression lets batch use now; it falls as HP rises "
                         "and never below the floor."))
         .with_panel(series(
             "Memory: HP and BE working set, BE limit", "bytes",
             q('coloc_memory_working_set_bytes{SEL, scope="hp"}', "{{node}} HP"),
             q('coloc_memory_working_set_bytes{SEL, scope="be"}', "{{node}} BE"),
             q("coloc_be_memory_high_bytes{SEL}", "{{node}} BE memory.high"),
             q("coloc_node_memory_capacity_bytes{SEL}", "{{node}} capacity")))
         .with_panel(series(
             "CPU by QoS tier", "short",
             q("coloc_tier_cpu_usage_cores{SEL}", "{{node}} {{tier}} used"),
             q("coloc_tier_cpu_requests_cores{SEL}", "{{node}} {{tier}} requested")))
         .with_panel(series(
             "Workloads", "none", q("sum by (node, tier, source) (coloc_workloads{SEL})",
                                    "{{node}} {{tier}} {{source}}"))))

    d = (d.with_row(Row("Suppression and its reaction"))
         .with_panel(series(
             "BE granted CPU by policy, BE cpuset and quota", "short",
             q("coloc_be_cpu_granted_cores{SEL}", "{{node}} granted ({{policy}})"),
             q("coloc_be_cpuset_cpus{SEL}", "{{node}} BE cpuset CPUs"),
             q("coloc_be_cpu_quota_cores{SEL}", "{{node}} BE quota"),
             q("coloc_be_cpu_idle{SEL}", "{{node}} BE SCHED_IDLE")))
         .with_panel(series(
             "HP pressure and throttling", "percentunit",
             q("coloc_hp_cpu_pressure_some_ratio{SEL}", "{{node}} HP CPU pressure (some)"),
             q('coloc_cpu_throttled_ratio{SEL, scope="hp"}', "{{node}} HP throttled"),
             q("coloc_io_hp_stall_ratio{SEL}", "{{node}} HP IO stall"),
             description="What suppression reacts to. HP throttled while BE sits at its floor: alert "
                         "ColocHPThrottledWhileBESuppressed."))
         .with_panel(series(
             "Suppression actions", "ops",
             q('sum by (node, kind, outcome) (rate(coloc_actions_total{SEL, policy="suppression"}'
               "[$__rate_interval]))", "{{node}} {{kind}} {{outcome}}"),
             q("sum by (node) (rate(coloc_cgroup_writes_total{SEL}[$__rate_interval]))",
               "{{node}} cgroup writes")))
         .with_panel(series(
             "Held back, by policy", "ops",
             q("sum by (node, policy) (rate(coloc_holds_total{SEL}[$__rate_interval]))",
               "{{node}} {{policy}}"),
             description="A policy wanted to act and held back: stale data, cool-down, rate limit.")))

    d = (d.with_row(Row("Evictions"))
         .with_panel(series(
             "Evictions by reason", "none",
             q("sum by (node, reason, source) (increase(coloc_evictions_total{SEL}[$__rate_interval]))",
               "{{node}} {{reason}} ({{source}})"), stacked=True))
         .with_panel(series(
             "Failed and refused evictions", "none",
             q("sum by (node, reason) (increase(coloc_eviction_failures_total{SEL}[$__rate_interval]))",
               "{{node}} failed: {{reason}}"),
             q("sum by (node, policy) (increase(coloc_protected_refusals_total{SEL}[$__rate_interval]))",
               "{{node}} protected: {{policy}}"),
             q("sum by (node, kind) (coloc_pending_actions{SEL})", "{{node}} pending: {{kind}}"))))

    d = (d.with_row(Row("Batch ledger and admission"))
         .with_panel(series(
             "Batch CPU: requested by scheduler against the origin", "short",
             q("coloc_batch_requested_cpu_cores{SEL}", "{{node}} {{scheduler}} requested"),
             q("coloc_batch_origin_cpu_cores{SEL}", "{{node}} origin"),
             q("coloc_batch_overcommit_cpu_cores{SEL}", "{{node}} overcommit"), stacked=True))
         .with_panel(series(
             "Batch memory: requested by scheduler against the origin", "bytes",
             q("coloc_batch_requested_memory_bytes{SEL}", "{{node}} {{scheduler}} requested"),
             q("coloc_batch_origin_memory_bytes{SEL}", "{{node}} origin"),
             q("coloc_batch_overcommit_memory_bytes{SEL}", "{{node}} overcommit"), stacked=True))
         .with_panel(series(
             "Ledger allocations", "none",
             q("sum by (node, source, phase) (coloc_ledger_allocations{SEL})",
               "{{node}} {{source}} {{phase}}")))
         .with_panel(series(
             "Node API: admissions refused, ledger writes, lifecycle", "none",
             q("sum by (node, reason) (increase(coloc_admissions_refused_total{SEL}[$__rate_interval]))",
               "{{node}} refused: {{reason}}"),
             q("changes(coloc_ledger_revision{SEL}[$__rate_interval])", "{{node}} ledger revisions"),
             q("coloc_node_lifecycle_state{SEL} == 1", "{{node}} {{state}}"),
             description="Admit calls refused by the node (reason), ledger revisions (every admission, "
                         "release, drain and recovery writes one) and the node's lifecycle state.")))

    d = (d.with_row(Row("Disk guard"))
         .with_panel(series(
             "Disk bandwidth: HP, BE and BE's cap", "Bps",
             q("sum by (node, device) (coloc_io_hp_bytes_per_second{SEL})", "{{node}} {{device}} HP"),
             q("sum by (node, device) (coloc_io_be_bytes_per_second{SEL})", "{{node}} {{device}} BE"),
             q('coloc_io_be_cap_bytes_per_second{SEL} < +Inf', "{{node}} {{device}} BE cap {{direction}}"),
             description="Read plus write per guarded disk; the cap is shown only while one is set."))
         .with_panel(series(
             "Disk IOPS: HP, BE and BE's cap", "iops",
             q("sum by (node, device) (coloc_io_hp_ios_per_second{SEL})", "{{node}} {{device}} HP"),
             q("sum by (node, device) (coloc_io_be_ios_per_second{SEL})", "{{node}} {{device}} BE"),
             q('coloc_io_be_cap_ios_per_second{SEL} < +Inf', "{{node}} {{device}} BE cap {{direction}}")))
         .with_panel(series(
             "Disk guard: HP idle, wake-ups, notes", "none",
             q("coloc_io_hp_idle_seconds{SEL}", "{{node}} {{device}} HP idle (s)"),
             q("rate(coloc_io_guard_wakeups_total{SEL}[$__rate_interval])", "{{node}} wake-ups/s"),
             q("coloc_io_config_notes{SEL}", "{{node}} config parts not acted on")))
         .with_panel(series(
             "Top workloads by IO", "Bps",
             q("topk(10, coloc_workload_io_bytes_per_second{SEL})", "{{node}} {{namespace}}/{{name}}"))))

    d = (d.with_row(Row("Sources"))
         .with_panel(series(
             "Sample age by source", "s",
             q("coloc_source_sample_age_seconds{SEL}", "{{node}} {{source}}"),
             q("coloc_source_stale{SEL} == 1", "{{node}} {{source}} STALE")))
         .with_panel(series(
             "Source fetch errors", "none",
             q("sum by (node, source, kind) "
               "(increase(coloc_source_fetch_errors_total{SEL}[$__rate_interval]))",
               "{{node}} {{source}} {{kind}}"))))

    d = (d.with_row(Row("The agent's own cost"))
         .with_panel(series(
             "CPU", "short", q("rate(process_cpu_seconds_total{SEL}[$__rate_interval])", "{{node}}"),
             description="Cores the agent process uses.", width=8))
         .with_panel(series(
             "Memory (RSS)", "bytes",
             q("process_resident_memory_bytes{SEL}", "{{node}} RSS"), width=8))
         .with_panel(series(
             "Open file descriptors", "none", q("process_open_fds{SEL}", "{{node}}"), width=8))
         .with_panel(series(
             "Tick and collection duration (p50, p99)", "s",
             q("histogram_quantile(0.5, sum by (node, le) "
               "(rate(coloc_tick_duration_seconds_bucket{SEL}[$__rate_interval])))", "{{node}} tick p50"),
             q("histogram_quantile(0.99, sum by (node, le) "
               "(rate(coloc_tick_duration_seconds_bucket{SEL}[$__rate_interval])))", "{{node}} tick p99"),
             q("histogram_quantile(0.99, sum by (node, le) "
               "(rate(coloc_collect_duration_seconds_bucket{SEL}[$__rate_interval])))",
               "{{node}} collection p99")))
         .with_panel(series(
             "Errors", "none",
             q("increase(coloc_tick_errors_total{SEL}[$__rate_interval])", "{{node}} tick errors"),
             q("increase(coloc_cgroup_write_errors_total{SEL}[$__rate_interval])",
               "{{node}} cgroup write errors"),
             q("sum by (node) (increase(coloc_collector_errors_total{SEL}[$__rate_interval]))",
               "{{node}} metrics sections left out"),
             q("increase(coloc_systemd_errors_total{SEL}[$__rate_interval])", "{{node}} systemd errors"),
             q("sum by (node) (increase(coloc_knob_overrides_total{SEL}[$__rate_interval]))",
               "{{node}} knobs put back"))))
    return d.build()


def render() -> str:
    return json.dumps(json.loads(JSONEncoder().encode(build())), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
