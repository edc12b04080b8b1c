"""The node API server: `coloc.v1.NodeAgent`, health and reflection, on a unix socket (TCP only when asked).

The socket file gets its mode and group between bind and listen, so there is no window in which it is
reachable with looser permissions; its directory is created 0750. File permissions decide who may connect
(and read); `agent.api.authz` decides who may mutate, from the peer credentials (SO_PEERCRED) of each
call's connection. TCP is TLS off loopback (`agent.config.api`).

The server is grpclib: pure asyncio on the agent's event loop, no thread of its own, so an idle API and a
held Watch cost no wake-up beyond the messages sent (docs/dependencies.md has the measurements).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import logging
import os
import socket
import ssl
import stat
from pathlib import Path

from grpc_health.v1 import health_pb2
from grpclib.const import Handler

from agent.api.authz import MUTATIONS, AccessPolicy
from agent.api.connection import GuardedServer
from agent.api.health import SERVICE as HEALTH_SERVICE
from agent.api.health import HealthService
from agent.api.reflect import V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME, ReflectionService
from agent.api.rpc import Limits, Method, PassThrough, method_table
from agent.api.service import SERVICE, NodeAgentService, PolicySettings
from agent.config.api import ApiConfig
from agent.published import Board
from agent.state.ledger import Ledger

log = logging.getLogger("coloc.api")


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
    """The node API: the servicers and the servers (unix socket, TCP) that answer them."""

    def __init__(self, service: NodeAgentService, health: HealthService, policy: AccessPolicy,
                 mapping: dict[str, Handler], limits: Limits, cfg: ApiConfig) -> None:
        self.service = service
        self.health = health
        self.policy = policy
        self.addresses: list[str] = []
        self.socket_path: Path | None = None
        self.tcp_bound: str | None = None  # host:port once bound (port 0 asks for any)
        self._mapping = mapping
        self._cfg = cfg
        self._servers: list[GuardedServer] = []
        self.limits = limits  # the calls in flight and bytes in receipt, across servers

    @property
    def address(self) -> str:
        return self.addresses[0]

    async def serve(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        # One connection may hold a quarter of the calls in flight (so one client cannot lock out the
        # rest), or h2's usual 100 where a quarter is fewer.
        limit = self._cfg.max_concurrent_rpcs
        server = GuardedServer(self._mapping, max(limit // 4, min(100, limit)), self._cfg.max_connections)
        self._servers.append(server)
        await server.start(sock=sock, backlog=socket.SOMAXCONN, ssl=tls)

    async def stop(self, grace: float | None = 1.0) -> None:
        """Report NOT_SERVING, end every call, close the listeners (the socket file is removed)."""
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        servers, self._servers = self._servers, []
        for server in servers:
            server.close_all()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), max(grace or 0, 0.1) + 1)
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)


def _listen_unix(path: Path, mode: int, gid: int | None) -> socket.socket:
    """The public socket, its mode and group set before it listens; the server accepts on it."""
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


def _tls_context(cfg: ApiConfig) -> ssl.SSLContext:
    """TLS 1.2+ with HTTP/2 by ALPN; with a client CA every TCP client must present a certificate it
    signed (then it may mutate); without, TLS clients may read but not mutate."""
    for setting in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        name = getattr(cfg, setting)
        if name is not None:
            try:
                Path(name).read_bytes()
            except OSError as err:
                raise ApiStartError(f"api.{setting}: cannot read {name}: {err.strerror}") from err
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    assert cfg.tls_cert_file is not None and cfg.tls_key_file is not None
    try:
        ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    except ssl.SSLError as err:
        raise ApiStartError(f"api.tls_cert_file / api.tls_key_file: not a PEM certificate chain and its "
                            f"key: {err}") from err
    if cfg.tls_client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=cfg.tls_client_ca_file)
        except ssl.SSLError as err:
            raise ApiStartError(f"api.tls_client_ca_file: not a PEM CA certificate: {err}") from err
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _mapping(limits: Limits, policy: AccessPolicy, service: NodeAgentService, health: HealthService
             ) -> dict[str, Handler]:
    """Every method the server answers, the mutations behind the access policy."""
    codec = PassThrough()
    methods = service.methods()
    guarded = {name: Method(policy.guard(name, m.func), m.cardinality, m.request, m.reply,
                            refuse_malformed=False)
               if name in MUTATIONS else m for name, m in methods.items()}
    reflection = ReflectionService((SERVICE, HEALTH_SERVICE))
    return {**method_table(SERVICE, guarded, limits, codec),
            **method_table(HEALTH_SERVICE, health.methods(), limits, codec),
            **method_table(V1ALPHA_SERVICE_NAME, reflection.methods(), limits, codec),
            **method_table(V1_SERVICE_NAME, reflection.methods(), limits, codec)}


async def start_api_server(ledger: Ledger, cfg: ApiConfig, *, board: Board | None = None,
                           settings: PolicySettings | None = None) -> ApiServer:
    """Serve the ledger. Raises ApiStartError naming the setting that prevents it."""
    policy = AccessPolicy(cfg)
    service = NodeAgentService(ledger, max_streams=cfg.max_streams,
                               bookmark_interval_s=cfg.bookmark_interval_s,
                               max_events_per_message=cfg.max_events_per_message,
                               max_message_bytes=cfg.max_message_bytes, board=board, settings=settings)
    health = HealthService()
    limits = Limits(cfg.max_message_bytes, cfg.max_concurrent_rpcs)
    api = ApiServer(service, health, policy, _mapping(limits, policy, service, health), limits, cfg)
    try:
        if cfg.socket_path is not None:
            path = Path(cfg.socket_path)
            gid = _gid(cfg.socket_group) if cfg.socket_group else None
            try:
                _prepare_socket_path(path, gid)
            except OSError as err:
                raise ApiStartError(f"api.socket_path: {path}: {err.strerror}") from err
            listener = _listen_unix(path, cfg.socket_mode, gid)
            api.socket_path = path
            await api.serve(listener)
            api.addresses.append(f"unix:{path}")
        if cfg.tcp_address is not None:
            tls = _tls_context(cfg) if cfg.tls_cert_file is not None else None
            sock, api.tcp_bound = _bind_tcp(cfg.tcp_address)
            await api.serve(sock, tls)
            api.addresses.append(api.tcp_bound)
    except BaseException:
        await api.stop(0)
        raise
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("node API serving", extra={"fields": {"addresses": api.addresses}})
    return api


def _bind_tcp(address: str) -> tuple[socket.socket, str]:
    host, _, port = address.rpartition(":")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, ValueError) as err:
        raise ApiStartError(f"api.tcp_address: cannot bind {address}: {err}") from err
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError as err:
        sock.close()
        raise ApiStartError(f"api.tcp_address: cannot bind {address}: {err.strerror}") from err
    return sock, f"{host}:{sock.getsockname()[1]}"
