"""A real Prometheus server (Debian package `prometheus`) scrapes the agent's metrics server.

The board is fed with a `Published` built from a hand-made snapshot (tests/metrics/nodes.py); the
metrics server, the HTTP scrape and Prometheus itself are all real.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from nodes import GiB, publication

from agent.metrics import LedgerFigures
from agent.published import ActionRecord, Board
from qos.model import Resources

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / "coloc-agent.rules.yml"


def test_prometheus_scrapes_the_agent_and_sees_the_published_values(prometheus, serve) -> None:
    board = Board()
    now = time.time()
    first = publication(
        tick=41,
        actions=(ActionRecord(now, "suppression", "SetBeCpuset", "besteffort", "applied", "hp busy"),),
        tick_duration_s=0.004,
    )
    board.publish(first)
    ledger = LedgerFigures(revision=12, lifecycle="schedulable", batch_origin=Resources(3000, 4 * GiB))
    hub, server = serve(board, ledger_view=lambda: ledger)
    hub.observe(first)
    second = dataclasses.replace(first, tick=42, tick_duration_s=0.2, actions=())  # nothing new done
    board.publish(second)
    hub.observe(second)

    host, port = server.address
    prom = prometheus([f"{host}:{port}"], rule_files=[RULES])
    prom.wait_for_scrape()

    assert prom.value('up{job="coloc-agent"}') == 1
    assert prom.value('coloc_cpu_usage_cores{scope="hp"}') == 2.0
    assert prom.value('coloc_tier_cpu_usage_cores{tier="besteffort"}') == 0.75
    assert prom.value('coloc_evictions_total{reason="memory_pressure",source="k8s"}') == 3
    assert prom.value('coloc_evictions_total{reason="cpu_satisfaction",source="yarn"}') == 0
    assert prom.value('coloc_be_cpu_granted_cores{policy="cpuset"}') == 1.0
    assert prom.value('coloc_node_lifecycle_state{state="schedulable"}') == 1
    assert prom.value('coloc_node_lifecycle_state{state="decommissioning"}') == 0
    # k8s 1.5 + yarn 2.0 requested against an origin of 3.0 cores
    assert prom.value("coloc_batch_overcommit_cpu_cores") == 0.5
    assert prom.value('coloc_source_stale{source="yarn"}') == 1
    assert prom.value('coloc_source_stale{source="kubelet"}') == 0
    # one observation per tick: 4 ms and 200 ms
    assert prom.value("coloc_tick_duration_seconds_count") == 2
    assert prom.value('coloc_tick_duration_seconds_bucket{le="0.005"}') == 1
    assert prom.value('coloc_actions_total{policy="suppression",kind="SetBeCpuset",outcome="applied"}') == 1
    rss = prom.value('process_resident_memory_bytes{job="coloc-agent"}')
    assert rss is not None and rss > 10 << 20

    # the scrape reads the board live: a new publication shows up in Prometheus
    counters = dataclasses.replace(second.counters, evictions={("memory_pressure", "k8s"): 5})
    board.publish(dataclasses.replace(second, tick=43, counters=counters))
    prom.wait_until('coloc_evictions_total{reason="memory_pressure",source="k8s"}', lambda v: v == 5)

    # every alert rule evaluates against the live series without error
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 8
    deadline = time.monotonic() + 15
    while any(r.get("lastEvaluation", "").startswith("0001") for r in rules) and time.monotonic() < deadline:
        time.sleep(0.5)
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert [(r["name"], r["health"]) for r in rules if r["health"] != "ok"] == []
