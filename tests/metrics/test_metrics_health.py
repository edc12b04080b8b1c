"""/healthz and /readyz over real HTTP, with a real loop thread publishing on a Board and then blocking."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from nodes import publication

from agent.metrics import HealthConfig
from agent.published import Board


def get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class Loop(threading.Thread):
    """Publishes a tick every `interval_s` until `block` is set, then hangs as a stuck loop would."""

    def __init__(self, board: Board, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.board = board
        self.interval_s = interval_s
        self.block = threading.Event()
        self.release = threading.Event()
        self.last_tick_monotonic = 0.0
        self.tick = 0

    def run(self) -> None:
        while not self.release.is_set():
            if self.block.is_set():
                self.release.wait()
                continue
            self.tick += 1
            self.last_tick_monotonic = time.monotonic()
            self.board.publish(
                publication(
                    tick=self.tick, tick_monotonic=self.last_tick_monotonic, interval_s=self.interval_s
                )
            )
            time.sleep(self.interval_s)


@pytest.mark.xdist_group("cpu")
def test_a_stalled_loop_turns_healthz_red_within_three_intervals(serve) -> None:
    interval = 0.5  # wide enough that a busy 2-CPU machine (the suite runs in parallel) keeps it green
    board = Board()
    loop = Loop(board, interval)
    loop.start()
    try:
        _, server = serve(board)
        while loop.tick < 2:
            time.sleep(0.01)
        for _ in range(4):
            status, body = get(server.url + "/healthz")
            assert status == 200 and body["status"] == "ok", body
            time.sleep(interval / 2)

        loop.block.set()
        time.sleep(interval * 1.1)  # let a tick in progress finish publishing
        stalled_since = loop.last_tick_monotonic
        while True:
            status, body = get(server.url + "/healthz")
            now = time.monotonic()
            if status != 200:
                break
            assert now - stalled_since < 3 * interval + 1.0, "still green long after three intervals"
            time.sleep(0.01)
        assert status == 503
        assert body["status"] == "stalled" and "3 intervals" in str(body["reason"])
        # red within three intervals of the last tick (plus the polling step), and not before
        assert 3 * interval <= now - stalled_since <= 3 * interval + 0.5
        assert float(body["tick_age_s"]) > float(body["limit_s"]) == pytest.approx(3 * interval)

        loop.block.clear()
        loop.release.set()  # the loop comes back
        loop.release = threading.Event()
        deadline = time.monotonic() + 5
        while get(server.url + "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "healthz did not turn green again"
            time.sleep(0.02)
    finally:
        loop.release.set()
        loop.join(timeout=5)


def test_healthz_before_the_first_tick_depends_on_the_startup_grace(serve) -> None:
    _, patient = serve(Board(), health=HealthConfig(startup_grace_s=60))
    status, body = get(patient.url + "/healthz")
    assert (status, body["status"]) == (200, "starting")
    _, strict = serve(Board(), health=HealthConfig(startup_grace_s=0))
    time.sleep(0.01)
    status, body = get(strict.url + "/healthz")
    assert (status, body["status"]) == (503, "stalled")


def test_healthz_uses_the_injected_clock(serve) -> None:
    clock = [1000.0]
    board = Board()
    board.publish(publication(tick_monotonic=1000.0, interval_s=1.0))
    _, server = serve(board, health=HealthConfig(clock=lambda: clock[0]))
    clock[0] = 1003.0
    assert get(server.url + "/healthz")[0] == 200  # exactly three intervals: still alive
    clock[0] = 1003.001
    assert get(server.url + "/healthz")[0] == 503


def test_readyz_follows_sources_synced(serve) -> None:
    board = Board()
    _, server = serve(board)
    status, body = get(server.url + "/readyz")
    assert (status, body["reason"]) == (503, "no tick published yet")
    unsynced = publication(synced=False)
    board.publish(unsynced)
    status, body = get(server.url + "/readyz")
    assert status == 503 and body["stale"] == {"yarn": "NodeManager REST timed out"}
    board.publish(dataclasses.replace(unsynced, tick=8, sources_synced=True))
    status, body = get(server.url + "/readyz")  # ready once synced; a source stale since is still named
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
