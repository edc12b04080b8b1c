"""The agent's /metrics over real HTTP: promtool's lint, values, failing sections, bounded cardinality."""

from __future__ import annotations

import dataclasses
import enum
import gzip
import itertools
import shutil
import subprocess
import time
import urllib.request
from types import SimpleNamespace

import pytest
from nodes import GiB, publication, small_node, workload

from agent.cli.top import MetricsView
from agent.config.load import ConfigError
from agent.metrics import LedgerFigures, MetricsConfig, MetricsHub
from agent.published import ActionRecord, Board, Counters
from qos.actions import EvictReason, HoldReason
from qos.model import Resources, Source, Tier, Usage


def scrape(url: str, accept: str = "text/plain; version=0.0.4") -> str:
    req = urllib.request.Request(url + "/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def series_names(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def full_board() -> tuple[Board, LedgerFigures]:
    board = Board()
    board.publish(publication())
    ledger = LedgerFigures(
        revision=3,
        lifecycle="decommissioning",
        drain_deadline=time.time() + 600,
        batch_origin=Resources(3000, 4 * GiB),
        allocations={("k8s", "running"): 2, ("yarn", "pending_launch"): 1},
    )
    return board, ledger


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian prometheus)")
@pytest.mark.parametrize("with_tick", [True, False], ids=["published", "before-first-tick"])
def test_promtool_check_metrics_passes_without_warnings(serve, with_tick: bool) -> None:
    board, ledger = full_board()
    if not with_tick:
        board = Board()
    hub, server = serve(board, ledger_view=lambda: ledger)
    if with_tick:
        hub.observe(
            publication(actions=(ActionRecord(1.0, "memory_eviction", "Evict", "k8s/x", "applied", "r"),))
        )
    text = scrape(server.url)
    assert ("coloc_cpu_usage_cores" in text) is with_tick
    proc = subprocess.run(
        ["promtool", "check", "metrics"], check=False, input=text, capture_output=True, text=True, timeout=30
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_values_follow_the_snapshot_and_the_ledger(serve) -> None:
    board, ledger = full_board()
    _, server = serve(board, ledger_view=lambda: ledger)
    view = MetricsView.parse(scrape(server.url))
    assert view.value("coloc_node_cpu_capacity_cores") == 4.0
    assert view.value("coloc_memory_working_set_bytes", scope="system") == GiB
    assert view.value("coloc_tier_memory_requests_bytes", tier="besteffort") == 3.5 * GiB
    assert view.value("coloc_workloads", tier="besteffort", source="yarn") == 1
    assert view.value("coloc_hp_cpu_pressure_some_ratio") == pytest.approx(0.015)
    assert view.value("coloc_batch_requested_cpu_cores", scheduler="yarn") == 2.0
    assert view.value("coloc_batch_overcommit_memory_bytes") == 0
    assert view.value("coloc_node_lifecycle_state", state="decommissioning") == 1
    assert view.value("coloc_node_lifecycle_state", state="schedulable") == 0
    assert view.value("coloc_node_drain_deadline_timestamp_seconds") == ledger.drain_deadline
    assert view.value("coloc_ledger_allocations", source="yarn", phase="pending_launch") == 1
    assert view.value("coloc_holds_total", policy="memory_eviction", reason="stale_data") == 4
    assert view.value("coloc_admissions_refused_total", reason="overcommitted") == 2
    assert view.value("coloc_eviction_failures_total", reason="memory_pressure") == 1
    assert view.value("coloc_cgroup_write_errors_total") == 2
    assert view.value("coloc_pending_actions", kind="SetBeCpuset") == 1
    assert view.value("coloc_be_cpu_floor_cores") == 1.0
    assert view.value("coloc_collector_errors_total", section="ledger_view") == 0


def test_batch_series_work_without_a_ledger(serve) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board)
    view = MetricsView.parse(scrape(server.url))
    # requested comes from the snapshot's BE workloads when the ledger is absent
    assert view.value("coloc_batch_requested_cpu_cores", scheduler="k8s") == 1.5
    assert view.value("coloc_batch_requested_memory_bytes", scheduler="yarn") == 2 * GiB
    for absent in (
        "coloc_batch_origin_cpu_cores",
        "coloc_batch_overcommit_cpu_cores",
        "coloc_node_lifecycle_state",
    ):
        assert view.series(absent) == []


def test_a_ledger_view_of_another_shape_is_read_by_attribute_name(serve) -> None:
    class Lifecycle(enum.Enum):
        DECOMMISSIONED = 4

    view_obj = SimpleNamespace(
        revision=9,
        lifecycle=Lifecycle.DECOMMISSIONED,
        batch_origin=Resources(1000, GiB),
        k8s_requested=SimpleNamespace(milli_cpu=1500, memory_bytes=GiB),
        yarn_requested=Resources(500, 0),
        allocations={(Source.K8S, "RUNNING"): 3},
    )
    board = Board()
    board.publish(publication())
    _, server = serve(board, ledger_view=lambda: view_obj)
    view = MetricsView.parse(scrape(server.url))
    assert view.value("coloc_node_lifecycle_state", state="decommissioned") == 1
    assert (
        view.value("coloc_batch_requested_cpu_cores", scheduler="k8s") == 1.5
    )  # the ledger wins over the snapshot
    assert view.value("coloc_batch_overcommit_cpu_cores") == 1.0
    assert view.value("coloc_ledger_allocations", source="k8s", phase="running") == 3


def test_a_failing_section_is_counted_and_the_scrape_still_succeeds(serve) -> None:
    calls = 0

    def broken_ledger() -> object:
        nonlocal calls
        calls += 1
        raise RuntimeError("ledger is being rebuilt")

    board = Board()
    bad = workload(9, milli_cpu="not a number")  # type: ignore[arg-type]
    snap = dataclasses.replace(small_node(), workloads=(*small_node().workloads, bad))
    board.publish(publication(snapshot=snap))
    _, server = serve(board, ledger_view=broken_ledger)
    scrape(server.url)
    text = scrape(server.url)
    view = MetricsView.parse(text)
    # 2 renders (a failing view never matches the cached render's) + 2 reads of the view as the cache key
    assert calls == 4
    assert view.value("coloc_collector_errors_total", section="ledger_view") == 2
    assert view.value("coloc_collector_errors_total", section="tiers") == 2
    assert view.value("coloc_collector_errors_total", section="workloads") == 2
    assert view.value("coloc_collector_errors_total", section="node") == 0
    # the failed sections are left out whole; the others are there
    assert view.series("coloc_tier_cpu_usage_cores") == []
    assert view.value("coloc_cpu_usage_cores", scope="node") == 3.0
    assert view.value("coloc_ticks_total") == 7


def test_a_malformed_ledger_view_is_an_error_naming_the_field(serve) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board, ledger_view=lambda: SimpleNamespace(drain_deadline="tomorrow"))
    view = MetricsView.parse(scrape(server.url))
    assert view.value("coloc_collector_errors_total", section="ledger_view") == 1
    assert view.series("coloc_node_drain_deadline_timestamp_seconds") == []


# Who holds: each policy's name, the executor's cpu.idle refusal, and the executor's refused evictions (by the
# eviction's reason): a fixed set.
POLICIES = tuple(dict.fromkeys(("cpu_suppression", "cpu_eviction", "memory_eviction", "batch_overcommit",
                                 "io", "network", "suppression", *(r.value for r in EvictReason))))


def coloc_series(text: str) -> list[str]:
    return [s for s in series_names(text) if s.startswith("coloc_")]


def test_series_stay_bounded_with_1000_workloads_and_many_holds(serve) -> None:
    def board_with(n: int, distinct_reasons: int, refusals: int) -> Board:
        wl = tuple(
            workload(i, source=Source.YARN if i % 3 == 0 else Source.K8S, milli_cpu=float(i), memory=i << 20)
            for i in range(n)
        )
        counters = Counters(
            ticks=1,
            # every policy holding for every reason there is: the most the label pair can take
            holds={(policy, code): i for i, (policy, code) in enumerate(
                itertools.product(POLICIES, list(HoldReason)[:distinct_reasons]))},
            admissions_refused={f"reason {i}": i for i in range(refusals)},
        )
        b = Board()
        b.publish(publication(snapshot=dataclasses.replace(small_node(), workloads=wl), counters=counters))
        return b

    _, small = serve(board_with(20, 1, 1), top_n=10, max_label_values=32)
    _, large = serve(board_with(1000, len(HoldReason), 5000), top_n=10, max_label_values=32)
    small_text, large_text = scrape(small.url), scrape(large.url)
    large_view = MetricsView.parse(large_text)
    assert len(large_view.series("coloc_workload_cpu_usage_cores")) == 10
    assert len(large_view.series("coloc_workload_memory_working_set_bytes")) == 10
    # the heaviest workloads are the ones exported
    top = max(large_view.series("coloc_workload_cpu_usage_cores"), key=lambda s: s[1])
    name = "container_1700000000000_0001_01_000999"  # workload 999 is a YARN container
    assert top == ({"namespace": "", "name": name, "source": "yarn", "tier": "besteffort"}, 0.999)
    # holds are keyed by a fixed set of codes: every pair is exported as itself, none folded into "other"
    assert len(large_view.series("coloc_holds_total")) == len(POLICIES) * len(HoldReason)
    assert {s[0]["reason"] for s in large_view.series("coloc_holds_total")} == {str(c) for c in HoldReason}
    assert len(large_view.series("coloc_admissions_refused_total")) == 33
    # 1,000 workloads and 5,000 free-text refusal reasons add at most 32 + 1 series, and every hold there
    # can be one each, over a quiet node
    most_holds = len(POLICIES) * len(HoldReason)
    assert len(coloc_series(large_text)) - len(coloc_series(small_text)) <= 33 + most_holds
    # and the quiet node's own: the fixed families (a new family or enum value moves it)
    assert len(coloc_series(small_text)) - len(POLICIES) < 220


def test_top_n_zero_turns_per_workload_series_off(serve) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board, top_n=0)
    assert "coloc_workload_" not in scrape(server.url)


def test_observe_counts_each_tick_and_each_action_once() -> None:
    hub = MetricsHub(MetricsConfig(port=0))
    a1 = ActionRecord(100.0, "suppression", "SetBeCpuset", "besteffort", "applied", "shrink")
    a2 = ActionRecord(101.0, "memory_eviction", "Evict", "k8s/x", "failed", "memory_pressure")
    hub.observe(publication(tick=1, actions=(a1,)))
    hub.observe(publication(tick=1, actions=(a1,)))  # the same tick again: ignored
    hub.observe(publication(tick=2, actions=(a2,)))  # each tick publishes its own records only
    hub.observe(publication(tick=3))
    assert hub.tick_duration._sum.get() == pytest.approx(0.012)  # three ticks of 4 ms
    assert hub.actions.get() == {
        ("suppression", "SetBeCpuset", "applied"): (1, 100.0),
        ("memory_eviction", "Evict", "failed"): (1, 101.0),
    }


def test_gzip_when_asked(serve) -> None:
    board = Board()
    board.publish(publication())
    hub, server = serve(board)
    for tick in (1, 2, 3):
        hub.observe(publication(tick=tick))
    req = urllib.request.Request(server.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        view = MetricsView.parse(gzip.decompress(resp.read()).decode())
    assert view.value("coloc_tick_duration_seconds_count") == 3


def test_openmetrics_is_negotiated(serve) -> None:
    board = Board()
    board.publish(publication())
    _, server = serve(board)
    text = scrape(server.url, accept="application/openmetrics-text; version=1.0.0")
    assert text.rstrip().endswith("# EOF")
    assert "coloc_evictions_total{" in text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("bind", "localhost:80", "metrics.bind"),
        ("port", 70000, "metrics.port"),
        ("top_n", -1, "metrics.top_n"),
        ("stall_intervals", 0.5, "metrics.stall_intervals"),
    ],
)
def test_bad_config_names_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MetricsConfig(**{field: value})  # type: ignore[arg-type]


def test_binds_where_configured_and_only_there(serve) -> None:
    board = Board()
    board.publish(publication(snapshot=dataclasses.replace(small_node(), hp_usage=Usage())))
    _, server = serve(board, bind="127.0.0.1")
    assert server.address[0] == "127.0.0.1"
    view = MetricsView.parse(scrape(server.url))
    assert view.series("coloc_cpu_usage_cores") and view.value("coloc_cpu_usage_cores", scope="hp") is None


def test_tier_sums_ignore_missing_usage() -> None:
    board = Board()
    wl = (
        workload(1, tier=Tier.BURSTABLE, milli_cpu=None, memory=None),
        workload(2, tier=Tier.BURSTABLE, milli_cpu=400, memory=GiB),
    )
    board.publish(publication(snapshot=dataclasses.replace(small_node(), workloads=wl)))
    hub = MetricsHub(MetricsConfig(port=0))
    hub.attach(board)
    from prometheus_client import generate_latest

    view = MetricsView.parse(generate_latest(hub.registry).decode())
    assert view.value("coloc_tier_cpu_usage_cores", tier="burstable") == 0.4
    assert view.value("coloc_workloads", tier="burstable", source="k8s") == 2
    assert len(view.series("coloc_workload_cpu_usage_cores")) == 1


def test_the_real_ledger_view_feeds_batch_and_lifecycle_series_through_a_drain(serve) -> None:
    """A real agent.state Ledger (no state file), synced from the hand-made snapshot, then drained."""
    ledger_mod = pytest.importorskip("agent.state.ledger")
    from agent.state.lifecycle import Trigger
    from agent.state.records import DrainPhase, DrainStatus

    ledger = ledger_mod.Ledger(ledger_mod.LedgerConfig(node_id="node-a", state_path=None), boot_id="b")
    now = time.time()
    ledger.sync(small_node(now), Resources(3000, 4 * GiB), now)
    ledger.ack_recovery(1, ledger.revision)
    ledger.sync(small_node(now), Resources(3000, 4 * GiB), now)  # the next tick refreshes last_view
    board = Board()
    board.publish(publication())
    _, server = serve(board, ledger_view=lambda: ledger.last_view)

    view = MetricsView.parse(scrape(server.url))
    assert view.value("coloc_node_lifecycle_state", state="schedulable") == 1
    assert view.value("coloc_ledger_revision") == ledger.revision
    assert view.value("coloc_ledger_allocations", source="k8s", phase="running") == 2
    assert view.value("coloc_batch_origin_cpu_cores") == 3.0
    assert view.value("coloc_batch_overcommit_cpu_cores") == 0.5  # 1.5 k8s + 2.0 yarn against 3.0
    assert view.series("coloc_node_drain_deadline_timestamp_seconds") == []

    deadline = now + 900
    drain = DrainStatus(
        phase=DrainPhase.WAIT_ALLOCATIONS,
        started_at=now,
        deadline=deadline,
        previous_batch_allocatable=Resources(3000, 4 * GiB),
    )
    ledger.transition(Trigger.DRAIN, 1, drain=drain)
    ledger.sync(small_node(now), Resources(3000, 4 * GiB), now + 1)  # reports 0 allocatable while draining
    assert ledger.last_view.node.batch_allocatable == Resources()
    view = MetricsView.parse(scrape(server.url))
    assert view.value("coloc_node_lifecycle_state", state="decommissioning") == 1
    assert view.value("coloc_node_drain_deadline_timestamp_seconds") == deadline
    # overcommit is measured against the budget the node offered before the drain, not the 0 it reports
    assert view.value("coloc_batch_origin_cpu_cores") == 3.0
    assert view.value("coloc_batch_overcommit_cpu_cores") == 0.5
