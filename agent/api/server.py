"""The node API server: `coloc.v1.NodeAgent`, health and reflection on grpc.aio, on the agent's event loop.

One gRPC server per listener, so each answers with its own authority and its own limits:

- the read socket (`api.socket_path`): reads; mutations refused (`agent.api.authz`);
- the admin socket (`api.admin_socket_path`): every method;
- TCP (`api.tcp_address`), only with TLS and required client certificates: mutations for the certificate
  names in `api.tls_client_names`.

gRPC binds a `unix:` path itself, so each socket is bound inside a fresh directory of mode 0700 (nobody
else can reach it there), given its mode and group, and only then renamed to its public path: there is no
moment in which it is reachable with looser permissions.

The HTTP/2 defences are gRPC core's, set from `api.*` (`server_options`; docs/api-access.md gives each
value and why, and what gRPC core does not defend).
"""

from __future__ import annotations

import asyncio
import errno
import grp
import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection_pb2 as rpb
from grpc_reflection.v1alpha.reflection import SERVICE_NAME as V1ALPHA_SERVICE_NAME
from grpc_reflection.v1alpha.reflection import aio as reflection_aio  # type: ignore[attr-defined]

from agent.api.authz import MUTATIONS, AccessPolicy, Listener
from agent.api.rpc import Cardinality, Method, handler_of
from agent.api.service import SERVICE, NodeAgentService, PolicySettings
from agent.config.api import ApiConfig
from agent.executors.resource_qos import HeldLimits
from agent.published import Board
from agent.state.ledger import Ledger
from agent.trace.switch import TraceSwitch

log = logging.getLogger("coloc.api")

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


class ApiStartError(Exception):
    """The server cannot start; the message says why and what to change."""


def server_options(cfg: ApiConfig, listener: Listener) -> list[tuple[str, int]]:
    """gRPC core's channel arguments for a listener (names as in grpc's channel_arg_names.h). gRPC core's
    overload protection (on by default) counts a stream against the limit until the server has let it go,
    so a rapid-reset peer queues at most that many calls ahead of everyone else's."""
    def ms(seconds: float) -> int:
        return int(seconds * 1000)

    streams = cfg.max_concurrent_streams if listener is Listener.READ else cfg.admin_max_concurrent_streams
    return [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_concurrent_streams", streams),
        ("grpc.max_metadata_size", cfg.max_metadata_bytes),
        ("grpc.absolute_max_metadata_size", cfg.max_metadata_bytes),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", ms(cfg.keepalive_min_interval_s)),
        ("grpc.http2.max_ping_strikes", cfg.max_ping_strikes),
        ("grpc.keepalive_time_ms", ms(cfg.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", ms(cfg.keepalive_timeout_s)),
        ("grpc.max_connection_idle_ms", ms(cfg.max_connection_idle_s)),
        ("grpc.max_connection_age_ms", ms(cfg.max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", ms(cfg.max_connection_age_grace_s)),
        ("grpc.server_handshake_timeout_ms", ms(cfg.handshake_timeout_s)),
        ("grpc.so_reuseport", 0),
    ]


def _gid(setting: str, group: str) -> int:
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ApiStartError(f"api.{setting}: no such group {group!r}") from None


def _prepare_socket_path(setting: str, path: Path, dir_mode: int, gid: int | None) -> None:
    """Create the directory; refuse to replace anything that is not a stale socket of ours."""
    if not path.parent.exists():
        path.parent.mkdir(mode=dir_mode, parents=True)
        os.chmod(path.parent, dir_mode)  # mkdir's mode is masked by the umask
        if gid is not None:
            os.chown(path.parent, -1, gid)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ApiStartError(f"api.{setting}: {path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ApiStartError(f"api.{setting}: cannot probe {path}: {err.strerror}") from err
        path.unlink(missing_ok=True)  # stale: left by a process that died
        return
    finally:
        probe.close()
    raise ApiStartError(f"api.{setting}: another process is serving on {path}")


def _tls_credentials(cfg: ApiConfig) -> grpc.ServerCredentials:
    def read(setting: str, name: str | None) -> bytes:
        assert name is not None  # ApiConfig requires all three with tcp_address
        try:
            return Path(name).read_bytes()
        except OSError as err:
            raise ApiStartError(f"api.{setting}: cannot read {name}: {err.strerror}") from err

    cert, key = read("tls_cert_file", cfg.tls_cert_file), read("tls_key_file", cfg.tls_key_file)
    ca = read("tls_client_ca_file", cfg.tls_client_ca_file)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


class ApiServer:
    """The node API: the servicers and one gRPC server per listener."""

    def __init__(self, service: NodeAgentService, health: Any, policy: AccessPolicy,
                 cfg: ApiConfig) -> None:
        self.service = service
        self.health = health
        self.policy = policy
        self.addresses: list[str] = []  # the read socket first (then TCP); see `admin_address`
        self.socket_path: Path | None = None
        self.admin_socket_path: Path | None = None
        self.tcp_bound: str | None = None  # host:port once bound (port 0 asks for any)
        self.servers: dict[Listener, grpc.aio.Server] = {}
        self._cfg = cfg

    @property
    def address(self) -> str:
        return self.addresses[0]

    @property
    def admin_address(self) -> str:
        """The admin socket, which serves every method."""
        if self.admin_socket_path is None:
            raise LookupError("no admin socket is served (api.admin_socket_path)")
        return f"unix:{self.admin_socket_path}"

    def build(self, listener: Listener) -> grpc.aio.Server:
        cfg = self._cfg
        server = grpc.aio.server(options=server_options(cfg, listener),
                                 maximum_concurrent_rpcs=cfg.max_concurrent_rpcs)
        handlers = [grpc.method_handlers_generic_handler(name, {
            method: handler_of(m, cfg.max_message_bytes)
            for method, m in methods.items()}) for name, methods in self._methods(listener).items()]
        server.add_generic_rpc_handlers(handlers)
        self.servers[listener] = server
        return server

    def _methods(self, listener: Listener) -> dict[str, dict[str, Method]]:
        guarded = {name: Method(self.policy.guard(name, listener, m.func), m.cardinality, m.request, m.reply,
                                refuse_malformed=False)
                   if name in MUTATIONS else m for name, m in self.service.methods().items()}
        health = {"Check": Method(self.health.Check, Cardinality.UNARY_UNARY, health_pb2.HealthCheckRequest,
                                  health_pb2.HealthCheckResponse),
                  "Watch": Method(self.health.Watch, Cardinality.UNARY_STREAM, health_pb2.HealthCheckRequest,
                                  health_pb2.HealthCheckResponse, writes=True)}
        names = (SERVICE, HEALTH_SERVICE, V1ALPHA_SERVICE_NAME, V1_SERVICE_NAME)
        # grpcio-reflection serves v1alpha; v1's messages are the same on the wire (same fields and numbers)
        servicer = reflection_aio.ReflectionServicer(names)  # type: ignore[attr-defined]
        reflection = {"ServerReflectionInfo": Method(
            servicer.ServerReflectionInfo, Cardinality.STREAM_STREAM, rpb.ServerReflectionRequest,
            rpb.ServerReflectionResponse)}
        return {SERVICE: guarded, HEALTH_SERVICE: health, V1ALPHA_SERVICE_NAME: reflection,
                V1_SERVICE_NAME: reflection}

    async def stop(self, grace: float | None = 1.0) -> None:
        """Report NOT_SERVING, end every call and connection (GOAWAY), remove the socket files."""
        try:
            await self.health.enter_graceful_shutdown()
        except Exception:  # the stop goes on: the servers below end every call anyway
            log.warning("health service could not report NOT_SERVING before the stop", exc_info=True)
        servers, self.servers = list(self.servers.values()), {}
        await asyncio.gather(*(server.stop(grace) for server in servers), return_exceptions=True)
        for path in (self.socket_path, self.admin_socket_path):
            if path is not None:
                path.unlink(missing_ok=True)


def _bind_unix(server: grpc.aio.Server, setting: str, path: Path, mode: int, gid: int | None,
               dir_mode: int = 0o750) -> None:
    """Bind `path` with `mode` and group `gid` and no moment of looser access: bound in a 0700 directory,
    chmod/chown there, then renamed into place. A directory it creates gets `dir_mode` and group `gid`."""
    try:
        _prepare_socket_path(setting, path, dir_mode, gid)
        private = Path(tempfile.mkdtemp(prefix=".coloc-api-", dir=path.parent))  # 0700
    except OSError as err:
        raise ApiStartError(f"api.{setting} {path}: cannot bind a socket in {path.parent}: "
                            f"{(err.strerror or str(err)).lower()}") from err
    try:
        bound = private / "s"
        try:
            server.add_insecure_port(f"unix:{bound}")
        except RuntimeError as err:
            raise ApiStartError(f"api.{setting}: cannot bind {path}: {err}") from err
        os.chmod(bound, mode)
        if gid is not None:
            os.chown(bound, -1, gid)
        os.rename(bound, path)
    except OSError as err:
        raise ApiStartError(f"api.{setting}: {path}: {err.strerror}") from err
    finally:
        shutil.rmtree(private, ignore_errors=True)


async def start_api_server(ledger: Ledger, cfg: ApiConfig, *, board: Board | None = None,
                           settings: PolicySettings | None = None,
                           limits: Callable[[], HeldLimits] | None = None,
                           trace: TraceSwitch | None = None) -> ApiServer:
    """Serve the ledger. Raises ApiStartError naming the setting that prevents it."""
    service = NodeAgentService(ledger, max_streams=cfg.max_streams,
                               bookmark_interval_s=cfg.bookmark_interval_s,
                               max_events_per_message=cfg.max_events_per_message,
                               max_message_bytes=cfg.max_message_bytes, board=board, settings=settings,
                               limits=limits, trace=trace)
    health = health_aio.HealthServicer()
    api = ApiServer(service, health, AccessPolicy(cfg), cfg)
    try:
        if cfg.socket_path is not None:
            path = Path(cfg.socket_path)
            gid = _gid("socket_group", cfg.socket_group) if cfg.socket_group else None
            # 0750 and the read group; an admin group other than it must reach its socket in there too
            shared = cfg.admin_socket_group not in (None, cfg.socket_group)
            _bind_unix(api.build(Listener.READ), "socket_path", path, cfg.socket_mode, gid,
                       0o755 if shared else 0o750)
            api.socket_path = path
            api.addresses.append(f"unix:{path}")
        if cfg.admin_socket_path is not None:
            path = Path(cfg.admin_socket_path)
            gid = _gid("admin_socket_group", cfg.admin_socket_group) if cfg.admin_socket_group else None
            _bind_unix(api.build(Listener.ADMIN), "admin_socket_path", path, cfg.admin_socket_mode, gid)
            api.admin_socket_path = path
        if cfg.tcp_address is not None:
            api.tcp_bound = _bind_tcp(api.build(Listener.TCP), cfg)
            api.addresses.append(api.tcp_bound)
        for server in api.servers.values():
            await server.start()
    except BaseException:
        await api.stop(0)
        raise
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    admin = api.admin_address if api.admin_socket_path is not None else ""
    log.info("node API serving", extra={"fields": {"addresses": api.addresses, "admin": admin}})
    return api


def _bind_tcp(server: grpc.aio.Server, cfg: ApiConfig) -> str:
    assert cfg.tcp_address is not None
    try:
        port = server.add_secure_port(cfg.tcp_address, _tls_credentials(cfg))
    except RuntimeError as err:
        raise ApiStartError(f"api.tcp_address: cannot bind {cfg.tcp_address}: {err}") from err
    return f"{cfg.tcp_address.rsplit(':', 1)[0]}:{port}"
