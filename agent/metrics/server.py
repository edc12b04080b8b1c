"""The HTTP server for `/metrics`, `/healthz` and `/readyz` on one port: one asyncio loop on one thread.

Why asyncio and not a thread per connection (or a worker pool): an idle connection then costs a few
hundred bytes, not a thread, so a flood of half-open connections cannot exhaust memory or the GIL, and a
fixed pool cannot be pinned by `max_connections` slow clients either, because every connection has a
deadline for its request head (`read_timeout_s`) and for its response (`write_timeout_s`). When
`max_connections` are open, a new connection first pushes out the oldest one still waiting for its request
(a slowloris victim, not a scrape in progress); only when every slot is busy answering is it refused with
503. `/metrics` is rendered at most once per published tick (and at least once a second) and then served
from memory, so any number of scrapers costs the loop one render per tick.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from agent.metrics.health import HealthConfig, Verdict, liveness, readiness
from agent.published import Board

__all__ = ["HealthConfig", "MetricsServer", "ServerLimits"]

log = logging.getLogger("coloc.metrics")

_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class ServerLimits:
    """`max_connections` open at once; a request head must arrive within `read_timeout_s` and fit in
    `max_head_bytes`; a response must be taken within `write_timeout_s`."""

    max_connections: int = 64
    read_timeout_s: float = 5.0
    write_timeout_s: float = 10.0
    max_head_bytes: int = 8192
    render_max_age_s: float = 1.0


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]


class _RenderCache:
    """The latest `/metrics` bodies per (format, gzip), valid while `inputs()` returns the same objects
    (the published tick, the ledger view) and for at most `max_age_s`."""

    def __init__(self, registry: CollectorRegistry, inputs: Callable[[], tuple[object, ...]],
                 max_age_s: float) -> None:
        self._registry = registry
        self._inputs = inputs
        self._max_age_s = max_age_s
        self._key: tuple[object, ...] = ()
        self._at = -1e9
        self._bodies: dict[tuple[str, bool], tuple[bytes, str]] = {}

    def body(self, accept: str, gzipped: bool) -> tuple[bytes, str]:
        now = time.monotonic()
        key = self._inputs()
        same = len(key) == len(self._key) and all(a is b for a, b in zip(key, self._key, strict=True))
        if not same or now - self._at > self._max_age_s:
            self._key, self._at = key, now
            self._bodies = {}
        encoder, content_type = choose_encoder(accept)
        cached = self._bodies.get((content_type, gzipped))
        if cached is None:
            body = encoder(self._registry)
            cached = (gzip.compress(body, compresslevel=1) if gzipped else body, content_type)
            self._bodies[(content_type, gzipped)] = cached
        return cached


def _response(code: int, content_type: str, body: bytes, head_only: bool = False,
              extra: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}", "Server: coloc-agent",
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return head if head_only else head + body


def _parse_head(raw: bytes) -> _Request | None:
    """The request line and headers, or None when they are not HTTP/1.x."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers[name.strip().lower()] = value.strip()
    return _Request(parts[0], urlsplit(parts[1]).path.rstrip("/") or "/", headers)


class MetricsServer:
    """A running server; `stop()` shuts it down and closes the socket."""

    def __init__(self, registry: CollectorRegistry, board: Board, health: HealthConfig,
                 limits: ServerLimits | None = None, inputs: Callable[[], tuple[object, ...]] | None = None,
                 persistence_error: Callable[[], str | None] = lambda: None) -> None:
        self.registry = registry
        self.board = board
        self.health = health
        self.limits = limits or ServerLimits()
        self.started = health.clock()
        self.refused = 0
        self._persistence_error = persistence_error  # why the state file cannot be written: not ready
        self.timed_out = 0
        self._cache = _RenderCache(registry, inputs or (lambda: (board.get(),)), self.limits.render_max_age_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._open: dict[asyncio.StreamWriter, bool] = {}  # writer → still waiting for its request

    @classmethod
    def start(cls, registry: CollectorRegistry, board: Board, bind: str, port: int, health: HealthConfig,
              limits: ServerLimits | None = None, inputs: Callable[[], tuple[object, ...]] | None = None,
              persistence_error: Callable[[], str | None] = lambda: None) -> MetricsServer:
        """Bind now (errors raise here) and serve from a daemon thread; `inputs` are what a rendered
        `/metrics` depends on (by identity), the published tick by default."""
        self = cls(registry, board, health, limits, inputs, persistence_error)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="coloc-metrics", daemon=True)
        thread.start()
        bound = asyncio.run_coroutine_threadsafe(asyncio.start_server(
            self._serve, bind, port, reuse_address=True, backlog=1024, limit=self.limits.max_head_bytes),
            loop)
        try:
            self._server = bound.result(timeout=30)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
            raise
        self._loop, self._thread = loop, thread
        log.info("metrics server listening on %s", self.url)
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("metrics server is not running")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def healthz(self) -> Verdict:
        return liveness(self.board.get(), self.health.clock(), self.started, self.health)

    def readyz(self) -> Verdict:
        return readiness(self.board.get(), self.health.clock(), self._persistence_error())

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Make room for a new connection: push out the oldest one still waiting for its request."""
        if len(self._open) < self.limits.max_connections:
            return True
        victim = next((w for w, waiting in self._open.items() if waiting), None)
        if victim is None:
            return False
        self._open.pop(victim, None)
        victim.transport.abort()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admit(writer):
            self.refused += 1
            writer.write(_response(503, _TEXT, b"metrics server busy\n"))
            writer.close()
            return
        self._open[writer] = True
        try:
            try:
                raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.read_timeout_s)
            except TimeoutError:
                self.timed_out += 1
                writer.transport.abort()
                return
            except asyncio.LimitOverrunError:
                await self._write(writer, _response(431, _TEXT, b"request head too large\n"))
                return
            if writer not in self._open:
                return
            self._open[writer] = False
            await self._write(writer, self._answer(_parse_head(raw)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.pop(writer, None)
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
        except TimeoutError:
            self.timed_out += 1
            writer.transport.abort()

    def _answer(self, req: _Request | None) -> bytes:
        if req is None:
            return _response(400, _TEXT, b"not an HTTP/1.x request\n")
        if req.method not in ("GET", "HEAD"):
            return _response(405, _TEXT, b"only GET and HEAD\n", extra={"Allow": "GET, HEAD"})
        head = req.method == "HEAD"
        try:
            return self._route(req, head)
        except Exception as err:  # the server must outlive any bug in a handler
            log.exception("metrics server: %s failed", req.path)
            return _response(500, _TEXT, f"internal error: {type(err).__name__}\n".encode(), head)

    def _route(self, req: _Request, head: bool) -> bytes:
        if req.path == "/metrics":
            gzipped = "gzip" in req.headers.get("accept-encoding", "")
            body, content_type = self._cache.body(req.headers.get("accept", ""), gzipped)
            return _response(200, content_type, body, head, {"Content-Encoding": "gzip"} if gzipped else None)
        if req.path in ("/healthz", "/readyz"):
            verdict = self.healthz() if req.path == "/healthz" else self.readyz()
            return _verdict(verdict, head)
        if req.path == "/":
            return _response(200, _TEXT, b"coloc-agent: /metrics /healthz /readyz\n", head)
        return _response(404, _TEXT, f"no such path: {req.path[:200]}\n".encode(), head)

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        loop, server, self._loop = self._loop, self._server, None
        if loop is None or server is None:
            return

        async def shutdown() -> None:
            server.close()
            for writer in list(self._open):
                writer.transport.abort()
            self._open.clear()
            await server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5)
        except Exception:  # the loop is stopped below all the same: connections go with it
            log.warning("metrics server: closing the listener and its connections failed", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not loop.is_running():
            loop.close()


def _verdict(verdict: Verdict, head: bool) -> bytes:
    body = (json.dumps(verdict.body, sort_keys=True) + "\n").encode()
    return _response(200 if verdict.ok else 503, "application/json", body, head)
