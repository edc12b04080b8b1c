"""A real agent process under HTTP/2 abuse, and what the issue asks of it while abused (issue 24).

`Watched` runs the agent (tests/kit/agentproc.py: private cgroup root, ticking every `INTERVAL_S`), a
well-behaved client calling GetSnapshot on the read socket over its own connection, and reads the agent's
tick counter and RSS, so each abuse test states the same four things: the tick cadence stays ≥ 95 % of the
configured one, the good client's GetSnapshot p99 stays ≤ 100 ms, the agent's memory stays bounded, the
abusive connection is closed. Abusers speak raw HTTP/2 with h2 over the unix socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from kit.agentproc import agent_config, metric, proc_kib, running_agent
from kit.bench import pct
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc

INTERVAL_S = 0.1
# Short deadlines, so that each test closes its abuser within seconds (the shipped values are in
# docs/api-access.md); the defences themselves are gRPC core's, as configured by agent/api/server.py.
API = {"handshake_timeout_s": 1.0, "max_connection_idle_s": 2.0, "max_connection_age_s": 4.0,
       "max_connection_age_grace_s": 1.0}
GRPC_HEADERS = [(":method", "POST"), (":scheme", "http"), (":authority", "agent"),
                ("content-type", "application/grpc"), ("te", "trailers")]
EMPTY_REQUEST = b"\x00\x00\x00\x00\x00"  # a gRPC message prefix of an empty message


@dataclass
class Figures:
    """What one abuse window measured."""

    seconds: float
    ticks: float
    snapshot_ms: list[float]
    snapshot_errors: list[str]
    rss_before_kib: int
    rss_peak_kib: int

    @property
    def cadence(self) -> float:
        return self.ticks * INTERVAL_S / self.seconds

    @property
    def snapshot_p99_ms(self) -> float:
        return pct(self.snapshot_ms, 99)

    def line(self) -> str:
        return (f"cadence {self.cadence:.3f} of configured ({self.ticks:.0f} ticks in {self.seconds:.1f} s), "
                f"GetSnapshot p50 {pct(self.snapshot_ms, 50):.1f} ms p99 {self.snapshot_p99_ms:.1f} ms "
                f"({len(self.snapshot_ms)} calls, {len(self.snapshot_errors)} errors), RSS "
                f"{self.rss_before_kib / 1024:.1f} -> peak {self.rss_peak_kib / 1024:.1f} MiB")

    def check(self, control: Figures, rss_growth_mib: float = 40.0) -> None:
        """The issue's bounds: cadence ≥ 95 % of configured, good GetSnapshot p99 ≤ 100 ms, bounded RSS.

        A loaded 2-core machine (other tests, other sessions) takes ticks and milliseconds from the agent
        whether it is abused or not, so the bounds are held against what a control window without abuse,
        just before, could reach: cadence ≥ 0.95 × min(1, the control's), p99 ≤ max(100 ms, 3 × the
        control's). On a quiet machine (control cadence 1, p99 a few ms) these are the issue's bounds. Both
        windows are printed (docs/api-access.md records them)."""
        print(f"control: {control.line()}")
        print(f"abused:  {self.line()}")
        assert self.cadence >= 0.95 * min(1.0, control.cadence), (self.line(), control.line())
        assert not self.snapshot_errors, self.snapshot_errors[:3]
        assert len(self.snapshot_ms) >= 10, self.line()
        assert self.snapshot_p99_ms <= max(100.0, 3 * control.snapshot_p99_ms), (self.line(), control.line())
        assert self.rss_peak_kib - self.rss_before_kib <= rss_growth_mib * 1024, self.line()


@dataclass
class Watched:
    proc_pid: int
    port: int
    socket: str
    _stop: threading.Event = field(default_factory=threading.Event)

    def ticks(self) -> float:
        return metric(self.port, "coloc_ticks_total")

    def window(self, seconds: float, during: Callable[[float], None] | None = None) -> Figures:
        """Measure for `seconds` while a good client calls GetSnapshot every 50 ms; `during(deadline)` runs
        in this thread meanwhile (the abuse), or the window just waits. The good client is a process of its
        own: in this one it waited for the abuser's Python (5,000 connects: one call of 141 ms in a CI run),
        which measured the test, not the agent."""
        peak = [proc_kib(self.proc_pid, "VmRSS")]
        before = peak[0]
        stop = threading.Event()

        def sample_rss() -> None:
            while not stop.wait(0.05):
                with contextlib.suppress(OSError):
                    peak[0] = max(peak[0], proc_kib(self.proc_pid, "VmRSS"))

        client = subprocess.Popen([sys.executable, "-c", _GOOD_CLIENT, self.socket], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        sampler = threading.Thread(target=sample_rss, daemon=True)
        try:
            assert client.stdin is not None and client.stdout is not None
            assert client.stdout.readline().strip() == "READY", "the good client did not connect"
            sampler.start()
            t0, ticks0 = time.monotonic(), self.ticks()
            client.stdin.write("GO\n")
            client.stdin.flush()
            end = t0 + seconds
            if during is not None:
                during(end)
            while time.monotonic() < end:
                time.sleep(0.05)
            elapsed, ticks = time.monotonic() - t0, self.ticks() - ticks0
            client.stdin.close()  # stop
            got = json.loads(client.stdout.readline())
        finally:
            stop.set()
            if client.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    client.wait(10)
            if client.poll() is None:
                client.kill()
                client.wait(10)
            if sampler.is_alive():
                sampler.join(10)
        return Figures(elapsed, ticks, got["ms"], got["errors"], before,
                       max(peak[0], proc_kib(self.proc_pid, "VmRSS")))


# The good client: connects, says READY, waits for GO, calls GetSnapshot every 50 ms until its stdin closes,
# then prints {"ms": [...], "errors": [...]}.
_GOOD_CLIENT = """
import json, sys, threading, time
import grpc
from agent.api.coloc.v1 import agent_pb2 as pb, agent_pb2_grpc as pb_grpc
ms, errors, stop = [], [], threading.Event()
big = [("grpc.max_receive_message_length", 64 << 20)]
with grpc.insecure_channel(f"unix:{sys.argv[1]}", options=big) as ch:
    stub = pb_grpc.NodeAgentStub(ch)
    stub.GetSnapshot(pb.GetSnapshotRequest(), timeout=5)  # connected before the clock starts
    print("READY", flush=True)
    sys.stdin.readline()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        t = time.perf_counter()
        try:
            stub.GetSnapshot(pb.GetSnapshotRequest(), timeout=5)
            ms.append((time.perf_counter() - t) * 1e3)
        except grpc.RpcError as err:
            errors.append(f"{err.code()}: {err.details()}")
        stop.wait(0.05)
print(json.dumps({"ms": ms, "errors": errors}), flush=True)
"""


@contextlib.contextmanager
def watched_agent(real_root: RealRoot, tmp: Path, **api: object) -> Iterator[Watched]:
    """The agent process with the test's short API deadlines, once it ticks and serves its read socket."""
    port = free_port()
    sock = tmp / "agent.sock"
    cfg = agent_config(tmp, real_root.name, port, loop={"interval_s": INTERVAL_S},
                       api={"socket_path": str(sock), **API, **api})
    with running_agent(cfg, tmp / "agent.log") as proc:
        def ready() -> bool:
            if not sock.exists() or metric(port, "coloc_ticks_total") < 5:
                return False
            with grpc.insecure_channel(f"unix:{sock}") as ch:
                pb_grpc.NodeAgentStub(ch).GetStatus(pb.GetStatusRequest(), timeout=2)
            return True
        assert wait(lambda: proc.poll() is None and ready(), 60), (tmp / "agent.log").read_text()[-3000:]
        yield Watched(proc.pid, port, str(sock))
        assert proc.poll() is None, (tmp / "agent.log").read_text()[-3000:]


class RawH2:
    """One raw HTTP/2 client connection over the unix socket (h2, no validation of what we send)."""

    def __init__(self, path: str, preface: bool = True, window: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(path)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                         validate_outbound_headers=False))
        self.closed_by_peer = False
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.outbox = bytearray()
        self.h2_error: h2.exceptions.ProtocolError | None = None  # ours: the server has not closed for it
        self.opened_at = time.monotonic()
        self.closed_at: float | None = None
        self.blocked = 0  # sends the server did not take at once (it stopped reading: back-pressure)
        if preface:
            self.conn.initiate_connection()
            if window is not None:
                self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
            self.flush()

    def flush(self) -> None:
        self.send(self.conn.data_to_send())

    def send(self, data: bytes = b"") -> bool:
        """Queue `data` and send what the socket takes now, whole frames kept in order (a server that stops
        reading back-pressures us, it does not cut a frame); False once the peer has closed."""
        self.outbox += data
        self.sock.settimeout(0.0)
        try:
            while self.outbox:
                n = self.sock.send(self.outbox)
                del self.outbox[:n]
        except BlockingIOError:
            self.blocked += 1
        except (BrokenPipeError, ConnectionResetError):
            # The peer has closed; what it sent before closing (a GOAWAY) is still queued for us to read.
            self.read()
            self._closed()
        return not self.closed_by_peer

    @property
    def backlog(self) -> int:
        return len(self.outbox)

    def read(self, timeout: float = 0.0) -> list[h2.events.Event]:
        """What has arrived (waiting up to `timeout`); marks the connection closed at EOF or GOAWAY."""
        events: list[h2.events.Event] = []
        self.sock.settimeout(timeout if timeout > 0 else 0.0001)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    self._closed()
                    break
                if self.h2_error is not None:
                    continue  # our h2 state is lost (we sent frames h2 did not make); only EOF counts now
                try:
                    new = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError as err:
                    self.h2_error = err
                    continue
                events += new
                for e in new:
                    if isinstance(e, h2.events.ConnectionTerminated):
                        self.goaway = e
                self.sock.settimeout(0.0001)
        except (TimeoutError, BlockingIOError):
            pass
        except (ConnectionResetError, BrokenPipeError):
            self._closed()
        return events

    def _closed(self) -> None:
        if not self.closed_by_peer:
            self.closed_by_peer, self.closed_at = True, time.monotonic()

    def how_closed(self) -> str:
        """How and when the server closed it, for the test's printed figures."""
        if not self.closed_by_peer:
            return "open"
        if self.closed_at is None:
            self.closed_at = time.monotonic()
        how = "EOF"
        if self.goaway is not None:
            how = f"GOAWAY {self.goaway.error_code!r} {self.goaway.additional_data or b''!r}"
        if self.h2_error is not None:
            how += f" (our h2 stopped parsing: {str(self.h2_error)[:80]})"
        return f"{how} {self.closed_at - self.opened_at:.1f} s after connecting"

    def wait_closed(self, timeout: float) -> bool:
        """True once the server closed the connection (EOF or reset) within `timeout`."""
        end = time.monotonic() + timeout
        while not self.closed_by_peer and time.monotonic() < end:
            self.read(0.1)
            with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
                self.flush()  # h2 answers the server's PINGs and SETTINGS (a live, reading peer)
            if self.closed_by_peer:
                break
        return self.closed_by_peer

    def open_call(self, method: str = "/coloc.v1.NodeAgent/GetSnapshot", body: bytes = EMPTY_REQUEST) -> int:
        sid: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [*GRPC_HEADERS[:3], (":path", method), *GRPC_HEADERS[3:]])
        self.conn.send_data(sid, body, end_stream=True)
        self.flush()
        return sid

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
