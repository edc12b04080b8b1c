"""grpclib's server, with the per-connection guards grpc core used to give us.

- Each connection announces the HTTP/2 stream limit it is given (h2's default is 100).
- A connection whose peer stops reading also stops being read: grpclib would otherwise keep answering
  its frames (PINGs) into asyncio's unbounded write buffer, 165 MiB a minute in a measured flood.
- A peer that resets streams faster than `MAX_RESETS_PER_S` (the HTTP/2 "rapid reset" attack: each
  opened stream starts a handler task) is sent GOAWAY (ENHANCE_YOUR_CALM) and closed; unchecked, one
  connection held the agent's event loop, and with it the tick, for over a second at a time.
- Connections beyond `api.max_connections` are closed as they arrive: unchecked, one local user could
  open connections until the agent ran out of descriptors (which its cgroup reads need too).
- Frames of unknown type are ignored, as RFC 9113 §4.1 requires (grpclib drops the connection with an
  error and a traceback).
- `close_all` ends every open connection with GOAWAY: grpclib's own `close` only stops the listener and
  cancels running calls, and an open connection could still start new ones, mutations included.
Two of these reach into grpclib internals (`connection._connection`, `processor.processors`); grpclib is
pinned exactly in requirements.lock and tests/api/test_api_connections.py covers each guard.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from grpclib.const import Handler
from grpclib.protocol import H2Protocol
from grpclib.server import Handler as ConnectionHandler
from grpclib.server import Server
from h2.errors import ErrorCodes
from h2.events import StreamReset, UnknownFrameReceived
from h2.settings import SettingCodes

from agent.api.rpc import PassThrough

MAX_RESETS_PER_S = 200
log = logging.getLogger("coloc.api")


class _Protocol(H2Protocol):
    max_streams = 100
    server: GuardedServer
    _refused = False

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        if not self.server.admit():
            self._refused = True
            transport.abort()
            return
        super().connection_made(transport)
        self._resets = 0
        self._reset_window = time.monotonic()
        self.connection._connection.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        self.connection.flush()
        processors = self.processor.processors
        processors[UnknownFrameReceived] = lambda event: None
        on_reset: Callable[[StreamReset], None] = processors[StreamReset]  # type: ignore[assignment]

        def counted_reset(event: StreamReset) -> None:
            on_reset(event)
            if event.remote_reset and self._too_many_resets():
                self.goaway(ErrorCodes.ENHANCE_YOUR_CALM)

        processors[StreamReset] = counted_reset

    def _too_many_resets(self) -> bool:
        now = time.monotonic()
        if now - self._reset_window >= 1.0:
            self._reset_window, self._resets = now, 0
        self._resets += 1
        return self._resets > MAX_RESETS_PER_S

    def goaway(self, code: ErrorCodes = ErrorCodes.NO_ERROR) -> None:
        """Tell the peer no new stream will be served, and close the connection."""
        if self._transport.is_closing():
            return
        try:
            self.connection._connection.close_connection(error_code=code)
            self.connection.flush()
        finally:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._refused:
            self.server.connections -= 1
            super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self._transport.is_closing():
            self._transport.resume_reading()


class _Table:
    def __init__(self, mapping: dict[str, Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


class GuardedServer(Server):
    """A grpclib server over one handler table, its connections guarded as above."""

    def __init__(self, mapping: dict[str, Handler], max_streams: int, max_connections: int) -> None:
        super().__init__([_Table(mapping)], codec=PassThrough())
        self._max_streams = max_streams
        self._open: weakref.WeakSet[_Protocol] = weakref.WeakSet()
        self.max_connections = max_connections
        self.connections = 0
        self.refused = 0

    def admit(self) -> bool:
        """Count a new connection in, unless `max_connections` are open."""
        if self.connections >= self.max_connections:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("node API: %d connections open (api.max_connections); closed a new one "
                            "(%d so far)", self.connections, self.refused)
            return False
        self.connections += 1
        return True

    def _protocol_factory(self) -> H2Protocol:  # grpclib's, with our protocol (grpclib pinned)
        self.__gc_step__()
        handler = ConnectionHandler(self._mapping, self._codec, self._status_details_codec, self.__dispatch__)
        self._handlers.add(handler)
        proto = _Protocol(handler, self._config, self._h2_config)
        proto.max_streams = self._max_streams
        proto.server = self
        self._open.add(proto)
        return proto

    def close_all(self) -> None:
        """Stop listening, cancel running calls, and end every open connection with GOAWAY."""
        self.close()
        for proto in list(self._open):
            if hasattr(proto, "_transport") and not proto._refused:
                proto.goaway()
