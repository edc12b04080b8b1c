"""HTTP/2 abuse of a real agent's read socket, spoken raw with h2 (issue 24).

For each abuse: the agent's tick cadence stays ≥ 95 % of configured, a well-behaved client's GetSnapshot is
still answered (p99 ≤ 100 ms), the agent's memory stays bounded, and the abusive connection is closed. Each
defence is gRPC core's, configured by agent/api/server.py; docs/api-access.md lists them with their values,
what gRPC core does not defend, and these tests' measured figures (printed with -s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import h2.events
import h2.exceptions
import pytest
from abusekit import API, RawH2, Watched, open_fds, watched_agent
from h2.errors import ErrorCodes
from kit.agentproc import proc_kib
from kit.realcg import real_root_or_skip

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.timing]
CONTROL_S = 2.5  # a window without abuse just before each abused one


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    """One agent for the module (each abuse ends with its connections closed): starts cost seconds here."""
    root = real_root_or_skip()
    try:
        with watched_agent(root, tmp_path_factory.mktemp("abuse")) as a:
            yield a
    finally:
        root.cleanup()


def test_a_ping_flood_is_sent_goaway_and_closed(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    abuser = RawH2(agent.socket)
    sent = [0]

    def flood(end: float) -> None:
        while time.monotonic() < end and not abuser.closed_by_peer:
            for _ in range(100):
                abuser.conn.ping(sent[0].to_bytes(8, "big"))
                sent[0] += 1
            if not abuser.send(abuser.conn.data_to_send()):
                break
            abuser.read()  # a reading peer: back-pressure is not what stops it
            while abuser.backlog > 1 << 16 and abuser.send() and time.monotonic() < end:
                abuser.read(0.01)

    figures = agent.window(4.0, flood)
    closed = abuser.wait_closed(5)
    abuser.close()
    print(f"PING flood: {sent[0]} PINGs sent; {abuser.how_closed()}; {figures.line()}")
    assert closed, f"still open after {sent[0]} PINGs"
    assert abuser.goaway is not None and abuser.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert sent[0] < 100_000
    figures.check(control)


def frames_flood(abuser: RawH2, burst: bytes, frames: int, sent: list[int], end: float) -> None:
    """`burst` (`frames` frames, counted in sent[0]) again and again until `end` or until the agent closes the
    connection, never more than 64 KiB unsent; what the agent sends back is read meanwhile."""
    while time.monotonic() < end and not abuser.closed_by_peer:
        if abuser.backlog < 1 << 16:
            abuser.send(burst)
            sent[0] += frames
        abuser.send()
        abuser.read(0.001)


def test_a_settings_flood_is_closed(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    abuser = RawH2(agent.socket)
    sent = [0]
    frame = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x00\x00\x00\x64"  # MAX_CONCURRENT 100

    figures = agent.window(4.0, lambda end: frames_flood(abuser, frame * 200, 200, sent, end))
    closed = abuser.wait_closed(5)
    abuser.close()
    print(f"SETTINGS flood: {sent[0]} SETTINGS sent; {abuser.how_closed()}; {figures.line()}")
    assert closed, f"still open after {sent[0]} SETTINGS frames"
    figures.check(control)


def test_empty_data_frames_in_a_loop_are_closed(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    abuser = RawH2(agent.socket)
    sid = abuser.conn.get_next_available_stream_id()
    abuser.conn.send_headers(sid, [*abuser_headers("/grpc.health.v1.Health/Watch")])
    abuser.flush()
    frame = b"\x00\x00\x00\x00\x00" + sid.to_bytes(4, "big")  # DATA, length 0, no END_STREAM
    sent = [0]

    figures = agent.window(4.0, lambda end: frames_flood(abuser, frame * 500, 500, sent, end))
    closed = abuser.wait_closed(5)
    abuser.close()
    print(f"empty DATA flood: {sent[0]} frames; {abuser.how_closed()}; {figures.line()}")
    assert closed, f"still open after {sent[0]} empty DATA frames"
    figures.check(control)


def abuser_headers(path: str) -> list[tuple[str, str]]:
    return [(":method", "POST"), (":scheme", "http"), (":authority", "agent"), (":path", path),
            ("content-type", "application/grpc"), ("te", "trailers")]


def test_rapid_reset_is_closed(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    abuser = RawH2(agent.socket)
    sent = [0]

    def flood(end: float) -> None:
        while time.monotonic() < end and not abuser.closed_by_peer and abuser.goaway is None:
            try:
                for _ in range(50):
                    sid = abuser.conn.get_next_available_stream_id()
                    abuser.conn.send_headers(sid, abuser_headers("/coloc.v1.NodeAgent/GetSnapshot"))
                    abuser.conn.reset_stream(sid)
                    sent[0] += 1
            except h2.exceptions.ProtocolError:  # our h2 saw the server's GOAWAY: no new stream
                break
            abuser.send(abuser.conn.data_to_send())
            abuser.read(0.001)
            while abuser.backlog > 1 << 16 and abuser.send() and time.monotonic() < end:
                abuser.read(0.01)

    figures = agent.window(4.0, flood)
    closed = abuser.wait_closed(5)
    abuser.close()
    print(f"rapid reset: {sent[0]} streams opened and reset; {abuser.how_closed()}; {figures.line()}")
    assert closed, f"still open after {sent[0]} resets"
    figures.check(control)


def test_a_peer_granting_no_window_holds_its_calls_only_until_max_connection_age(agent: Watched) -> None:
    """gRPC core times out no write: a stream whose answer the peer never lets through keeps its call (and
    its slot in max_concurrent_rpcs) until the connection goes, at max_connection_age + grace."""
    control = agent.window(CONTROL_S)  # before any abuser connects
    abuser = RawH2(agent.socket, window=0)
    answered: set[int] = set()
    abuser.read(1.0)  # the server's SETTINGS: its stream limit
    limit = abuser.conn.remote_settings.max_concurrent_streams
    assert limit == 16

    def hold(end: float) -> None:
        while abuser.conn.open_outbound_streams < limit:
            abuser.open_call()  # GetSnapshot: its answer needs window the peer never grants
        while time.monotonic() < end and not abuser.closed_by_peer:
            for e in abuser.read(0.2):
                if isinstance(e, h2.events.DataReceived | h2.events.StreamEnded):
                    answered.add(e.stream_id)

    figures = agent.window(3.0, hold)
    age, grace = API["max_connection_age_s"], API["max_connection_age_grace_s"]
    closed = abuser.wait_closed(age + grace + 3)
    abuser.close()
    print(f"no window: {limit} calls held (the stream limit), {len(answered)} answered; "
          f"{abuser.how_closed()}; {figures.line()}")
    assert not answered
    assert closed and abuser.closed_at is not None
    assert age - 0.5 <= abuser.closed_at - abuser.opened_at <= age + grace + 2, abuser.how_closed()
    figures.check(control)


def test_slow_prefaces_are_closed_at_the_handshake_deadline(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    slow = [RawH2(agent.socket, preface=False) for _ in range(200)]
    sent = [0]

    def dribble(end: float) -> None:
        while time.monotonic() < end and sent[0] < len(preface):
            for c in slow:
                if not c.closed_by_peer:
                    c.send(preface[sent[0]:sent[0] + 1])
                    c.read()
            sent[0] += 1
            time.sleep(0.25)

    figures = agent.window(4.0, dribble)
    started = time.monotonic()
    closed = sum(c.wait_closed(max(0.1, started + 3 - time.monotonic())) for c in slow)
    for c in slow:
        c.close()
    print(f"slow preface: {closed} of {len(slow)} closed ({sent[0]} bytes of the preface each; the first: "
          f"{slow[0].how_closed()}); {figures.line()}")
    assert closed == len(slow)
    figures.check(control)


def test_5000_idle_connections_are_closed_and_others_still_served(agent: Watched) -> None:
    control = agent.window(CONTROL_S)  # before any abuser connects
    fds_before = open_fds(agent.proc_pid)
    idle: list[RawH2] = []

    def connect(end: float) -> None:
        while len(idle) < 5000 and time.monotonic() < end:
            idle.append(RawH2(agent.socket))

    figures = agent.window(4.0, connect)
    opened = len(idle)
    end = time.monotonic() + API["max_connection_idle_s"] + 8
    closed = sum(c.wait_closed(max(0.05, end - time.monotonic())) for c in idle)
    for c in idle:
        c.close()
    print(f"idle connections: {opened} opened, {closed} closed by the agent (the first: "
          f"{idle[0].how_closed()}; the last: {idle[-1].how_closed()}); fds {fds_before} before, "
          f"{open_fds(agent.proc_pid)} after; "
          f"RSS after {proc_kib(agent.proc_pid, 'VmRSS') / 1024:.1f} MiB; {figures.line()}")
    assert opened == 5000
    assert closed == opened
    figures.check(control, rss_growth_mib=120.0)
