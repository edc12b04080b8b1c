"""A small threaded HTTP(S) server with switchable misbehaviour, the base of every fake.

Modes (for GET answers): ok, slow (no answer for `slow_s`), trickle (headers, then one byte every
`trickle_every_s`), garbage (an HTML page), truncated (Content-Length promises more than is sent),
empty (200 with no body), error500. `stop()` makes it "down" (connection refused); `start()` brings
it back on the same port.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "slow", "trickle", "garbage", "truncated", "empty", "error500")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, status: int, doc: object) -> Answer:
        return cls(status, json.dumps(doc).encode())


class FakeHttpServer:
    """Subclasses implement `route(rec) -> Answer`."""

    def __init__(self, *, tls: tuple[str, str] | None = None) -> None:
        self.tls = tls  # (certfile, keyfile)
        self.mode = "ok"
        self.slow_s = 10.0
        self.trickle_every_s = 0.2
        self.requests: list[Recorded] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> FakeHttpServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner._conns.add(self.connection)

            def finish(self) -> None:
                with owner._lock:
                    owner._conns.discard(self.connection)
                super().finish()

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with owner._lock:
                    owner.requests.append(rec)
                owner._answer(self, rec)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:  # kept-alive client connections die with the server, as with a real outage
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def seen(self, method: str | None = None, path_prefix: str = "") -> list[Recorded]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(path_prefix)
            ]

    # -- answering ---------------------------------------------------------------------------------

    def route(self, rec: Recorded) -> Answer:
        raise NotImplementedError

    def _answer(self, h: BaseHTTPRequestHandler, rec: Recorded) -> None:
        mode = self.mode if rec.method == "GET" else "ok"
        if mode == "slow":
            self._stopping.wait(self.slow_s)
            h.close_connection = True
            return
        if mode == "error500":
            ans = Answer(500, b"Internal Server Error\n", "text/plain")
        elif mode == "garbage":
            ans = Answer(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
        elif mode == "empty":
            ans = Answer(200, b"")
        else:
            ans = self.route(rec)
        h.send_response(ans.status)
        h.send_header("Content-Type", ans.content_type)
        for k, v in ans.headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(ans.body)))
        if mode in ("truncated", "trickle"):
            h.send_header("Connection", "close")
        h.end_headers()
        if mode == "truncated":
            h.wfile.write(ans.body[: len(ans.body) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        if mode == "trickle":
            for i in range(len(ans.body)):
                if self._stopping.wait(self.trickle_every_s):
                    break
                try:
                    h.wfile.write(ans.body[i : i + 1])
                    h.wfile.flush()
                except OSError:
                    break
            h.close_connection = True
            return
        h.wfile.write(ans.body)
