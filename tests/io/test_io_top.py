"""`coloc-agent top` shows the disk guard: per disk HP's and BE's IO and BE's caps, read from the agent's own
/metrics exposition (the real prometheus_client output of the agent's collector)."""

from __future__ import annotations

import dataclasses

from metrics.nodes import publication, small_node
from prometheus_client import generate_latest

from agent.cli.top import MetricsView, render
from agent.metrics import MetricsConfig, MetricsHub
from agent.published import Board
from qos.model import DiskSample, IoCap, IoRate, IoSample


def _frame(io: IoSample | None) -> str:
    board = Board()
    board.publish(publication(snapshot=dataclasses.replace(small_node(), io=io)))
    hub = MetricsHub(MetricsConfig(port=0))
    hub.attach(board)
    return render(MetricsView.parse(generate_latest(hub.registry).decode()), "test", now=0.0)


def test_top_shows_each_guarded_disk_with_hp_be_and_the_cap() -> None:
    io = IoSample((DiskSample("254:16", IoRate(wbps=800_000, wiops=200), IoRate(wbps=19_500_000, wiops=19),
                              0.1, IoCap(20_000_000, 20_000_000, 400, 400)),
                   DiskSample("8:0", IoRate(), IoRate(rbps=3e8), 12.0, IoCap())), 14.0)
    shown = _frame(io)
    lines = [line for line in shown.splitlines() if line.startswith("disk")]
    assert len(lines) == 2, shown
    assert "254:16  HP 0.8 MB/s 200 IO/s (waits 14%)  BE 19.5 MB/s  BE cap write 20.0 read 20.0 MB/s" \
        in lines[0], lines
    assert "8:0  HP 0.0 MB/s 0 IO/s (waits 14%)  BE 300.0 MB/s  BE cap write none read none MB/s" \
        in lines[1], lines


def test_top_has_no_disk_line_while_the_guard_is_off() -> None:
    assert not [line for line in _frame(None).splitlines() if line.startswith("disk")]
