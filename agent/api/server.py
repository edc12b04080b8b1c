"""The gRPC server: `coloc.v1.NodeAgent`, health and reflection, on a unix socket (TCP only when asked).

The socket file gets its mode and group between bind and listen, so there is no window in which it is
reachable with looser permissions; its directory is created 0750. File permissions decide who may connect
(and read); `agent.api.authz` decides who may mutate, from the peer credentials `agent.api.peergate`
reads on each connection (gRPC itself listens on a private socket behind the gate). TCP is TLS off
loopback (`agent.config.api`).

The gRPC server behind the gate runs only while someone uses it (`api.idle_stop_s`): gRPC core's threads
wake ~6 times a second even with no call, which alone broke the agent's wake-up budget (docs/performance.md).
A grpc.aio server cannot be restarted, so each start builds a fresh one around the same servicers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import grp
import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from agent.api.authz import AccessPolicy
from agent.api.peergate import OnDemand, PeerGate
from agent.api.reflect import enable_reflection
from agent.api.service import SERVICE, NodeAgentService, PolicySettings
from agent.config.api import ApiConfig
from agent.published import Board
from agent.state.ledger import Ledger

log = logging.getLogger("coloc.api")

IDLE_STOP_GRACE_S = 0.5  # an idle stop has no call in flight (no connection is open)

class ApiStartError(Exception):
    """The server cannot start; the message says why and what to change."""


def _gid(group: str) -> int:
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ApiStartError(f"api.socket_group: no such group {group!r}") from None


def _prepare_socket_path(path: Path, gid: int | None) -> None:
    """Create the directory; refuse to replace anything that is not a stale socket of ours."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o750, parents=True)
        if gid is not None:
            os.chown(path.parent, -1, gid)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ApiStartError(f"api.socket_path: {path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ApiStartError(f"api.socket_path: cannot probe {path}: {err.strerror}") from err
        path.unlink(missing_ok=True)  # stale: left by a process that died
        return
    finally:
        probe.close()
    raise ApiStartError(f"api.socket_path: another process is serving on {path}")


class ApiServer:
    """The node API: the servicers, the gate, and the gRPC server around them while one runs."""

    def __init__(self, build: Callable[[], grpc.aio.Server], service: NodeAgentService,
                 health: health_aio.HealthServicer, policy: AccessPolicy,
                 tcp: tuple[ApiConfig, str] | None = None) -> None:
        self._build = build
        self.service = service
        self.health = health
        self.addresses: list[str] = []
        self.policy = policy
        self.gate: PeerGate | None = None
        self.socket_path: Path | None = None
        self.private_dir: Path | None = None
        self.server: grpc.aio.Server | None = None  # None while idle-stopped
        self.starts = 0
        self._tcp = tcp
        self.tcp_bound: str | None = None  # host:port once bound (port 0 asks for any)
        self._lock = asyncio.Lock()
        self._closing = False  # set by `stop`: a start the gate queued before it may not run after it
        self._loop = asyncio.get_running_loop()  # the servicers' loop: every server runs on it

    @property
    def address(self) -> str:
        return self.addresses[0]

    @property
    def private_socket(self) -> Path | None:
        return None if self.private_dir is None else self.private_dir / "g.sock"

    async def ensure_running(self) -> None:
        """Start a fresh gRPC server unless one runs."""
        async with self._lock:
            if self._closing:
                raise ApiStartError("node API: shutting down; no new gRPC server")
            if self.server is None:
                self.server = await self._start_fresh()

    async def stop_server(self, grace: float | None = IDLE_STOP_GRACE_S) -> None:
        """Stop the gRPC server (not the gate): its threads go quiet until `ensure_running`."""
        async with self._lock:
            server, self.server = self.server, None
            if server is not None:
                await server.stop(grace)

    def on_demand(self, idle_s: float) -> OnDemand:
        """What the gate calls, from its own thread, to start and stop the server on this loop."""
        return OnDemand(start=lambda: self._call(self.ensure_running()),
                        stop=lambda: self._call(self.stop_server()), idle_s=idle_s)

    def _call(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _start_fresh(self) -> grpc.aio.Server:
        server = self._build()
        try:
            if self.private_socket is not None:
                self.private_socket.unlink(missing_ok=True)  # left by the last server (grpc may keep it)
                try:
                    server.add_insecure_port(f"unix:{self.private_socket}")
                except RuntimeError as err:
                    raise ApiStartError(f"api.socket_path: cannot bind {self.private_socket}: {err}") from err
            if self._tcp is not None:
                self.tcp_bound = _serve_tcp(server, *self._tcp)
            await server.start()
        except BaseException:
            await server.stop(0)
            raise
        self.starts += 1
        log.debug("node API: gRPC server started", extra={"fields": {"starts": self.starts}})
        return server

    async def stop(self, grace: float | None = 1.0) -> None:
        """Report NOT_SERVING, end every stream, close the listeners (the socket file is removed)."""
        self._closing = True
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        if self.gate is not None:
            self.gate.stop()  # no new connections; the open ones end with the server
        await self.stop_server(grace)
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)


def _listen_unix(path: Path, mode: int, gid: int | None) -> socket.socket:
    """The public socket, its mode and group set before it listens; the gate accepts on it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
        if gid is not None:
            os.chown(path, -1, gid)
    except OSError as err:
        sock.close()
        raise ApiStartError(f"api.socket_path: cannot bind {path}: {err.strerror}") from err
    return sock


def _tls_credentials(cfg: ApiConfig) -> grpc.ServerCredentials:
    def read(setting: str, name: str | None) -> bytes | None:
        if name is None:
            return None
        try:
            return Path(name).read_bytes()
        except OSError as err:
            raise ApiStartError(f"api.{setting}: cannot read {name}: {err.strerror}") from err

    cert, key = read("tls_cert_file", cfg.tls_cert_file), read("tls_key_file", cfg.tls_key_file)
    ca = read("tls_client_ca_file", cfg.tls_client_ca_file)
    assert cert is not None and key is not None
    # With a client CA every TCP client must present a certificate it signed (grpc-python cannot ask for
    # one only on some methods); without, TLS clients may read but not mutate.
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


async def _serve_unix(api: ApiServer, cfg: ApiConfig, socket_path: str) -> str:
    path = Path(socket_path)
    gid = _gid(cfg.socket_group) if cfg.socket_group else None
    try:
        _prepare_socket_path(path, gid)
        private = Path(tempfile.mkdtemp(prefix=".coloc-grpc-", dir=path.parent))  # 0700: the agent only
    except OSError as err:
        raise ApiStartError(f"api.socket_path: {path}: {err.strerror}") from err
    api.private_dir = private
    return f"unix:{path}"


def _build_server(cfg: ApiConfig, policy: AccessPolicy, service: NodeAgentService,
                  health: health_aio.HealthServicer) -> grpc.aio.Server:
    """A new gRPC server (no ports yet) around the given servicers."""
    options = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_concurrent_streams", cfg.max_concurrent_rpcs),
        ("grpc.so_reuseport", 0),
        *cfg.options,
    ]
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,
                             interceptors=(policy,))
    server.add_generic_rpc_handlers((service.handler(),))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    enable_reflection(server, (SERVICE, health_name))
    return server


async def start_api_server(ledger: Ledger, cfg: ApiConfig, *, board: Board | None = None,
                           settings: PolicySettings | None = None) -> ApiServer:
    """Serve the ledger. Raises ApiStartError naming the setting that prevents it."""
    policy = AccessPolicy(cfg, None)
    service = NodeAgentService(ledger, max_streams=cfg.max_streams,
                               bookmark_interval_s=cfg.bookmark_interval_s,
                               max_events_per_message=cfg.max_events_per_message,
                               max_message_bytes=cfg.max_message_bytes, board=board, settings=settings)
    health = health_aio.HealthServicer()
    api = ApiServer(lambda: _build_server(cfg, policy, service, health), service, health, policy,
                    tcp=(cfg, cfg.tcp_address) if cfg.tcp_address is not None else None)
    try:
        if cfg.socket_path is not None:
            api.addresses.append(await _serve_unix(api, cfg, cfg.socket_path))
        # Started once even when on demand: a setting that prevents serving fails the start, and gRPC's
        # one-off initialisation is not paid by the first client (whose connect may allow only 100 ms).
        await api.ensure_running()
        if api.tcp_bound is not None:
            api.addresses.append(api.tcp_bound)
        if cfg.socket_path is not None and api.private_socket is not None:
            gid = _gid(cfg.socket_group) if cfg.socket_group else None
            listener = _listen_unix(Path(cfg.socket_path), cfg.socket_mode, gid)
            api.socket_path = Path(cfg.socket_path)
            # remote clients do not pass the gate, so with TCP the server always runs
            idle = cfg.idle_stop_s if cfg.tcp_address is None else 0
            if idle > 0:
                await api.stop_server()  # nobody is connected yet
            api.gate = PeerGate(listener, str(api.private_socket), api.on_demand(idle) if idle > 0 else None)
            api.policy.gate = api.gate
            api.gate.start()
    except BaseException:
        await api.stop(0)
        raise
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("node API serving", extra={"fields": {"addresses": api.addresses}})
    return api


def _serve_tcp(server: grpc.aio.Server, cfg: ApiConfig, address: str) -> str:
    try:
        if cfg.tls_cert_file is not None:
            port = server.add_secure_port(address, _tls_credentials(cfg))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise ApiStartError(f"api.tcp_address: cannot bind {address}: {err}") from err
    host = address.rsplit(":", 1)[0]
    return f"{host}:{port}"
