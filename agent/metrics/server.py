"""The HTTP server for `/metrics`, `/healthz` and `/readyz` on one port (stdlib, daemon threads)."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from agent.metrics.health import HealthConfig, Verdict, liveness, readiness
from agent.published import Board

__all__ = ["HealthConfig", "MetricsServer"]

log = logging.getLogger("coloc.metrics")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server_version = "coloc-agent"
    owner: MetricsServer  # set on the per-server subclass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            if path == "/metrics":
                self._metrics()
            elif path == "/healthz":
                self._verdict(self.owner.healthz())
            elif path == "/readyz":
                self._verdict(self.owner.readyz())
            elif path == "/":
                self._send(200, "text/plain; charset=utf-8", b"coloc-agent: /metrics /healthz /readyz\n")
            else:
                self._send(404, "text/plain; charset=utf-8", f"no such path: {path}\n".encode())
        except Exception as err:  # the server thread must outlive any bug in a handler
            log.exception("metrics server: %s failed", path)
            self._send(500, "text/plain; charset=utf-8", f"internal error: {type(err).__name__}\n".encode())

    def _metrics(self) -> None:
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(self.owner.registry)
        extra: dict[str, str] = {}
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, compresslevel=1)
            extra["Content-Encoding"] = "gzip"
        self._send(200, content_type, body, extra)

    def _verdict(self, verdict: Verdict) -> None:
        body = (json.dumps(verdict.body, sort_keys=True) + "\n").encode()
        self._send(200 if verdict.ok else 503, "application/json", body)

    def _send(self, code: int, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics server: " + format, *args)


class MetricsServer:
    """A running server; `stop()` shuts it down and closes the socket."""

    def __init__(self, registry: CollectorRegistry, board: Board, health: HealthConfig) -> None:
        self.registry = registry
        self.board = board
        self.health = health
        self.started = health.clock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def start(
        cls, registry: CollectorRegistry, board: Board, bind: str, port: int, health: HealthConfig
    ) -> MetricsServer:
        self = cls(registry, board, health)
        handler = type("Handler", (_Handler,), {"owner": self})
        server_cls = _Server6 if ":" in bind else _Server
        self._httpd = server_cls((bind, port), handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="coloc-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics server listening on %s", self.url)
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._httpd is None:
            raise RuntimeError("metrics server is not running")
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def healthz(self) -> Verdict:
        return liveness(self.board.get(), self.health.clock(), self.started, self.health)

    def readyz(self) -> Verdict:
        return readiness(self.board.get(), self.health.clock())

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
