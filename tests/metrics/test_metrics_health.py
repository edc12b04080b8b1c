"""/healthz and /readyz over real HTTP, the loop's ticks published on a Board at the times of a fake clock."""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request

import pytest
from kit.agentproc import get_json
from kit.clock import FakeClock
from nodes import publication

from agent.metrics import HealthConfig
from agent.published import Board


def test_a_stalled_loop_turns_healthz_red_within_three_intervals(serve) -> None:
    interval = 0.5
    clock = FakeClock()
    board = Board()
    _, server = serve(board, health=HealthConfig(clock=clock))
    tick = 0

    def publish() -> None:  # the loop's tick, at the clock's time
        nonlocal tick
        tick += 1
        board.publish(publication(tick=tick, tick_monotonic=clock(), interval_s=interval))

    for _ in range(4):
        publish()
        clock.advance(interval / 2)
        status, body = get_json(server.url + "/healthz")
        assert status == 200 and body["status"] == "ok", body

    publish()  # the last tick: the loop stalls after it
    clock.advance(3 * interval)  # three intervals since the last tick: not red before
    status, body = get_json(server.url + "/healthz")
    assert status == 200 and body["status"] == "ok", body
    clock.advance(0.001)
    status, body = get_json(server.url + "/healthz")
    assert status == 503
    assert body["status"] == "stalled" and "3 intervals" in str(body["reason"])
    assert float(body["tick_age_s"]) > float(body["limit_s"]) == pytest.approx(3 * interval)

    publish()  # the loop comes back
    assert get_json(server.url + "/healthz")[0] == 200, "healthz did not turn green again"


def test_healthz_before_the_first_tick_depends_on_the_startup_grace(serve) -> None:
    clock = FakeClock()
    _, patient = serve(Board(), health=HealthConfig(startup_grace_s=60, clock=clock))
    status, body = get_json(patient.url + "/healthz")
    assert (status, body["status"]) == (200, "starting")
    _, strict = serve(Board(), health=HealthConfig(startup_grace_s=0, clock=clock))
    clock.advance(0.01)
    status, body = get_json(strict.url + "/healthz")
    assert (status, body["status"]) == (503, "stalled")


def test_healthz_uses_the_injected_clock(serve) -> None:
    clock = [1000.0]
    board = Board()
    board.publish(publication(tick_monotonic=1000.0, interval_s=1.0))
    _, server = serve(board, health=HealthConfig(clock=lambda: clock[0]))
    clock[0] = 1003.0
    assert get_json(server.url + "/healthz")[0] == 200  # exactly three intervals: still alive
    clock[0] = 1003.001
    assert get_json(server.url + "/healthz")[0] == 503


def test_readyz_follows_sources_synced(serve) -> None:
    board = Board()
    _, server = serve(board)
    status, body = get_json(server.url + "/readyz")
    assert (status, body["reason"]) == (503, "no tick published yet")
    unsynced = publication(synced=False)
    board.publish(unsynced)
    status, body = get_json(server.url + "/readyz")
    assert status == 503 and body["stale"] == {"yarn": "NodeManager REST timed out"}
    board.publish(dataclasses.replace(unsynced, tick=8, sources_synced=True))
    status, body = get_json(server.url + "/readyz")  # ready once synced; a source stale since is still named
    assert (status, body["status"], body["tick"]) == (200, "ready", 8)
    assert body["stale"] == {"yarn": "NodeManager REST timed out"}
    assert body["sources"]["yarn"]["stale"] is True


def test_unknown_paths_are_404_and_stop_releases_the_port(serve) -> None:
    board = Board()
    _, server = serve(board)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(server.url + "/nope", timeout=5)
    assert err.value.code == 404
    url = server.url
    server.stop()
    server.stop()  # twice is fine
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/healthz", timeout=2)
