"""docs/metrics.md documents exactly the families the agent exports (no more, no fewer)."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

from nodes import GiB, publication, small_node
from prometheus_client import generate_latest

from agent.metrics import LedgerFigures, MetricsConfig, MetricsHub
from agent.published import Board
from qos.model import DiskSample, IoCap, IoRate, IoSample, NetworkSample, Resources

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_list_every_exported_family_and_nothing_else() -> None:
    snap = small_node()
    snap = dataclasses.replace(snap, be_tier=dataclasses.replace(snap.be_tier, quota_milli_cpu=1500),
                               network=NetworkSample(link_bps=10**8, hp_bps=1e7, be_bps=1e6,
                                                     be_ceil_bps=4 * 10**7, be_rate_bps=10**7, owned=True),
                               io=IoSample((DiskSample("254:0", IoRate(wbps=8e5, wiops=200),
                                                       IoRate(wbps=1.5e9), 0.1, IoCap(wbps=20_000_000)),),
                                           12.0, by_workload={snap.workloads[0].key: IoRate(rbps=1e6)}))
    board = Board()
    board.publish(publication(snapshot=snap))
    ledger = LedgerFigures(
        revision=1,
        lifecycle="decommissioning",
        drain_deadline=time.time() + 60,
        batch_origin=Resources(1000, GiB),
        allocations={("k8s", "running"): 1},
    )
    hub = MetricsHub(MetricsConfig(port=0))
    hub.attach(board, ledger_view=lambda: ledger)
    text = generate_latest(hub.registry).decode()
    families = set(re.findall(r"^# TYPE (coloc_\w+) ", text, flags=re.M))
    exported = {n for n in families if not n.endswith("_created")}
    documented = set(re.findall(r"^\| `(coloc_\w+)` \|", DOC.read_text(), flags=re.M))
    assert exported - documented == set(), "exported but not documented"
    assert documented - exported == set(), "documented but not exported"
    assert len(exported) >= 54
