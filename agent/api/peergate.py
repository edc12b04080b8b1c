"""The unix socket's gate: accepts each connection, reads the peer's SO_PEERCRED, forwards the bytes.

grpc-python exposes no peer credentials (measured with grpcio 1.85: `context.peer()` is `unix:` and
`auth_context()` holds only the transport type, also with `local_server_credentials(UDS)`). So the gate
accepts on the public socket itself and connects to the gRPC server's private socket (in a 0700
directory only the agent's user can enter) from a socket bound to an abstract name carrying the peer's
uid, gid and pid and a per-start token; gRPC reports that name as the call's peer
(`unix-abstract:coloc-peer-<token>-<uid>-<gid>-<pid>-<n>`). The forwarding runs on its own thread and
event loop, so a busy client never delays the agent's tick loop.

With an `OnDemand`, the gate also decides when the gRPC server runs: it asks for one on a connection
while none runs (and waits for it before connecting), and asks it to stop after `idle_s` with no open
connection, because gRPC core's threads wake several times a second even with no call. Both requests are
serialised on the gate's loop, so a connection that arrives while a stop is under way waits for the stop
and then for a fresh server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("coloc.api")

_PEER = re.compile(r"^unix-abstract:coloc-peer-([0-9a-f]{16})-(\d+)-(\d+)-(\d+)-\d+$")
_CHUNK = 256 << 10


@dataclass(frozen=True, slots=True)
class PeerCred:
    pid: int
    uid: int
    gid: int


def peer_cred(sock: socket.socket) -> PeerCred:
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    return PeerCred(pid, uid, gid)


@dataclass(frozen=True, slots=True)
class OnDemand:
    """How the gate starts and stops the server behind it; both callable from the gate's thread."""

    start: Callable[[], concurrent.futures.Future[None]]
    stop: Callable[[], concurrent.futures.Future[None]]
    idle_s: float


class PeerGate:
    """Listens on `listener` (already bound, mode and group set); forwards every connection to `upstream`."""

    def __init__(self, listener: socket.socket, upstream: str, on_demand: OnDemand | None = None) -> None:
        self.token = secrets.token_hex(8)
        self._listener = listener
        self._upstream = upstream
        self._seq = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="api-peer-gate", daemon=True)
        self._conns: set[socket.socket] = set()
        self._on_demand = on_demand
        self._open = 0  # connections accepted and not yet closed (gate thread only)
        self._up = on_demand is None  # on demand, the gate starts with the server stopped
        self._switch: asyncio.Lock | None = None  # serialises start and stop requests
        self._idle_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.idle_stops = 0

    def cred_of(self, peer: str) -> PeerCred | None:
        """The credentials recorded for a call's `context.peer()`; None if it did not pass the gate."""
        m = _PEER.match(peer)
        if m is None or m.group(1) != self.token:
            return None
        return PeerCred(pid=int(m.group(4)), uid=int(m.group(2)), gid=int(m.group(3)))

    def start(self) -> None:
        self._listener.setblocking(False)
        self._listener.listen(socket.SOMAXCONN)  # 512 overflowed when 1,000 clients connected at once
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        for s in (self._listener, *self._conns):
            with contextlib.suppress(OSError):
                s.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._switch = asyncio.Lock()
        self._loop.create_task(self._accept())
        self._loop.run_forever()
        tasks = asyncio.all_tasks(self._loop)
        for t in tasks:
            t.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _accept(self) -> None:
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._listener)
            except OSError as err:
                log.warning("api gate: accept failed: %s", err)
                await asyncio.sleep(0.05)
                continue
            self._loop.create_task(self._serve(conn))

    def _arm_idle(self) -> None:
        if self._on_demand is not None and self._open == 0:
            self._idle_timer = self._loop.call_later(self._on_demand.idle_s, self._idle_expired)

    def _idle_expired(self) -> None:
        task = self._loop.create_task(self._stop_if_idle())
        self._tasks.add(task)  # the loop holds tasks only weakly
        task.add_done_callback(self._tasks.discard)

    async def _ensure_up(self) -> None:
        assert self._on_demand is not None and self._switch is not None
        async with self._switch:
            if not self._up:
                # shielded: a gate shutting down must not cancel the server's start half-way
                await asyncio.shield(asyncio.wrap_future(self._on_demand.start()))
                self._up = True

    async def _stop_if_idle(self) -> None:
        assert self._on_demand is not None and self._switch is not None
        async with self._switch:
            if self._open or not self._up:  # a connection came while the timer fired
                return
            self._up = False
            self.idle_stops += 1
            try:
                await asyncio.shield(asyncio.wrap_future(self._on_demand.stop()))
            except Exception as err:  # the next connection builds a fresh server regardless
                log.warning("api gate: idle stop of the gRPC server failed: %s", err)
            else:
                log.debug("api gate: gRPC server stopped, no connection for %.0f s (stop %d)",
                          self._on_demand.idle_s, self.idle_stops)

    async def _serve(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        self._conns.add(conn)
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.setblocking(False)
        self._conns.add(up)
        self._open += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        try:
            cred = peer_cred(conn)
            self._seq += 1
            up.bind(f"\0coloc-peer-{self.token}-{cred.uid}-{cred.gid}-{cred.pid}-{self._seq}")
            if self._on_demand is not None:
                await self._ensure_up()
            await self._loop.sock_connect(up, self._upstream)
            await asyncio.gather(self._pipe(conn, up), self._pipe(up, conn))
        except OSError as err:
            log.debug("api gate: connection ended: %s", err)
        except Exception as err:  # the server could not start (or the agent is stopping): this client only
            log.warning("api gate: no gRPC server for a connection: %s", err)
        finally:
            for s in (conn, up):
                self._conns.discard(s)
                s.close()
            self._open -= 1
            self._arm_idle()

    async def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := await self._loop.sock_recv(src, _CHUNK):
                await self._loop.sock_sendall(dst, data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
