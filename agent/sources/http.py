"""HTTP(S) GET of JSON with a total deadline, a body-size cap, TLS with a chosen CA and a bearer token.

Blocking `http.client` in a worker thread: every socket operation gets the time left until the deadline,
so a server that trickles bytes cannot hold a fetch longer than `timeout_s`. A body over `max_body_bytes`
is dropped while it streams in, before any decoding. Failures are `FetchError` with a short `kind` (down,
timeout, tls, http, truncated, too_large, garbage, auth) and a clear message.

`aget_parsed` runs fetch, JSON decoding and the caller's parse function in ONE worker-thread call, so the
event loop only receives the parsed result. Decoding goes element by element through top-level arrays
(`loads_stepwise`): one `json.loads` of a whole list holds the GIL for the whole document (about 1.3 s for
50 MB), while per-element decoding lets the interpreter hand the GIL to the loop at every switch interval.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

_CHUNK = 256 * 1024
_DECODER = json.JSONDecoder()
T = TypeVar("T")


class FetchError(Exception):
    """A fetch that gave no usable answer. `kind` is short and stable (for logs and metrics)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class HttpEndpoint:
    base_url: str
    timeout_s: float
    max_body_bytes: int
    ca_file: str = ""
    insecure_skip_verify: bool = False
    token_file: str = ""


def _tls_context(ep: HttpEndpoint) -> ssl.SSLContext:
    if ep.insecure_skip_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    try:
        return ssl.create_default_context(cafile=ep.ca_file or None)
    except (OSError, ssl.SSLError) as err:
        raise FetchError("tls", f"cannot load CA file {ep.ca_file!r}: {err}") from err


def _token(ep: HttpEndpoint) -> str | None:
    if not ep.token_file:
        return None
    try:
        with open(ep.token_file, encoding="ascii") as f:
            token = f.read(16384).strip()
    except (OSError, UnicodeDecodeError) as err:
        raise FetchError("auth", f"cannot read token file {ep.token_file!r}: {err}") from err
    if not token or any(c.isspace() for c in token):
        raise FetchError("auth", f"token file {ep.token_file!r} is empty or malformed")
    return token


def _headers(ep: HttpEndpoint) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "coloc-agent"}
    token = _token(ep)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _check_status(resp: http.client.HTTPResponse, where: str) -> None:
    if resp.status != 200:
        snippet = resp.read(200).decode("utf-8", "replace").strip().replace("\n", " ")
        raise FetchError("http", f"{where} answered HTTP {resp.status} {resp.reason}: {snippet[:120]}")


def _read_body(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, deadline: float,
               ep: HttpEndpoint, where: str) -> bytes:
    """The whole body, within the deadline and the size cap; each socket read gets the time left."""
    body = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchError("timeout", f"{where}: body not complete after {ep.timeout_s}s")
        if conn.sock is not None:
            conn.sock.settimeout(left)
        chunk = resp.read1(_CHUNK)  # one socket read: a trickling server meets the deadline
        if not chunk:
            break
        body += chunk
        if len(body) > ep.max_body_bytes:
            raise FetchError("too_large", f"{where}: body larger than {ep.max_body_bytes} bytes")
    if resp.length:  # Content-Length promised more than arrived
        raise FetchError("truncated", f"{where}: connection closed {resp.length} bytes before the end")
    return bytes(body)


def _fetch_error(err: http.client.HTTPException | OSError, where: str, timeout_s: float) -> FetchError:
    """The FetchError for what the connection raised (the order matters: the classes overlap)."""
    if isinstance(err, http.client.IncompleteRead):
        return FetchError("truncated", f"{where}: body cut short after {len(err.partial)} bytes")
    if isinstance(err, TimeoutError):
        return FetchError("timeout", f"{where}: no answer within {timeout_s}s")
    if isinstance(err, ssl.SSLError):
        return FetchError("tls", f"{where}: TLS failed: {err.reason or err}")
    if isinstance(err, http.client.RemoteDisconnected):
        return FetchError("down", f"{where}: connection closed without an answer")
    if isinstance(err, http.client.HTTPException):
        return FetchError("garbage", f"{where}: not an HTTP answer: {type(err).__name__}")
    return FetchError("down", f"{where}: {err.strerror or err}")


class HttpFetcher:
    """GETs `base_url + path`; one connection per request (the cadence is seconds, not milliseconds)."""

    def __init__(self, endpoint: HttpEndpoint) -> None:
        parts = urlsplit(endpoint.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {endpoint.base_url!r}")
        self.endpoint = endpoint
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._ctx = _tls_context(endpoint) if self._https else None

    @property
    def url(self) -> str:
        return self.endpoint.base_url

    def get_bytes(self, path: str) -> bytes:
        """Blocking GET; returns the body of a 200 answer or raises FetchError."""
        ep = self.endpoint
        deadline = time.monotonic() + ep.timeout_s
        where = f"{ep.base_url}{path}"
        conn = self._connect()
        try:
            conn.request("GET", self._prefix + path, headers=_headers(ep))
            resp = conn.getresponse()
            _check_status(resp, where)
            return _read_body(conn, resp, deadline, ep, where)
        except (http.client.HTTPException, OSError) as err:
            raise _fetch_error(err, where, ep.timeout_s) from err
        finally:
            conn.close()

    def _connect(self) -> http.client.HTTPConnection:
        ep = self.endpoint
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=ep.timeout_s, context=self._ctx)
        return http.client.HTTPConnection(self._host, self._port, timeout=ep.timeout_s)

    def get_json(self, path: str) -> object:
        body = self.get_bytes(path)
        if not body.strip():
            raise FetchError("garbage", f"{self.url}{path}: empty body")
        try:
            return loads_stepwise(body)
        except (ValueError, RecursionError) as err:
            raise FetchError("garbage", f"{self.url}{path}: not JSON ({str(err)[:80]})") from err

    def get_parsed(self, path: str, parse: Callable[[object], T]) -> T:
        """Blocking GET, JSON decoding and `parse` of the document; `parse`'s own errors propagate."""
        return parse(self.get_json(path))

    async def aget_parsed(self, path: str, parse: Callable[[object], T]) -> T:
        """`get_parsed` in a worker thread: the event loop sees only the parsed result."""
        return await asyncio.to_thread(self.get_parsed, path, parse)


def loads_stepwise(body: bytes) -> object:
    """`json.loads(body)`, but the arrays that are values of the top-level object (a PodList's `items`,
    …) are decoded one element at a time, so no single C call holds the GIL for the whole document."""
    text = body.decode(json.detect_encoding(body))
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM")
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return json.loads(text)
    out: dict[str, object] = {}
    pos = _skip(text, pos + 1)
    if text.startswith("}", pos):
        return _end(text, pos + 1, out)
    while True:
        if not text.startswith('"', pos):
            raise ValueError(f"Expecting property name enclosed in double quotes at char {pos}")
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise ValueError(f"Expecting ':' delimiter at char {pos}")
        pos = _skip(text, pos + 1)
        value, pos = _array(text, pos) if text.startswith("[", pos) else _DECODER.raw_decode(text, pos)
        out[key] = value
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            return _end(text, pos + 1, out)
        if not text.startswith(",", pos):
            raise ValueError(f"Expecting ',' delimiter at char {pos}")
        pos = _skip(text, pos + 1)


def _array(text: str, pos: int) -> tuple[list[object], int]:
    """Decode the array starting at `text[pos] == "["`, one element per C call."""
    items: list[object] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return items, pos + 1
    while True:
        item, pos = _DECODER.raw_decode(text, pos)
        items.append(item)
        pos = _skip(text, pos)
        if text.startswith("]", pos):
            return items, pos + 1
        if not text.startswith(",", pos):
            raise ValueError(f"Expecting ',' delimiter at char {pos}")
        pos = _skip(text, pos + 1)


def _skip(text: str, pos: int) -> int:
    """The position of the first non-whitespace character at or after `pos`."""
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _end(text: str, pos: int, out: dict[str, object]) -> dict[str, object]:
    if _skip(text, pos) != len(text):
        raise ValueError(f"Extra data at char {pos}")
    return out
