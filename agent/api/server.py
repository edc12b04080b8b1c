"""The gRPC server: `coloc.v1.NodeAgent`, health and reflection, on a unix socket (TCP only when asked).

The socket file gets its mode and group between bind and listen, so there is no window in which it is
reachable with looser permissions; its directory is created 0750. File permissions decide who may connect
(and read); `agent.api.authz` decides who may mutate, from the peer credentials `agent.api.peergate`
reads on each connection (gRPC itself listens on a private socket behind the gate). TCP is TLS off
loopback (`agent.config.api`).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import logging
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from agent.api.authz import AccessPolicy
from agent.api.peergate import PeerGate
from agent.api.reflect import enable_reflection
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
    def __init__(self, server: grpc.aio.Server, service: NodeAgentService,
                 health: health_aio.HealthServicer, addresses: list[str], policy: AccessPolicy) -> None:
        self.server = server
        self.service = service
        self.health = health
        self.addresses = addresses
        self.policy = policy
        self.gate: PeerGate | None = None
        self.socket_path: Path | None = None
        self.private_dir: Path | None = None

    @property
    def address(self) -> str:
        return self.addresses[0]

    async def stop(self, grace: float | None = 1.0) -> None:
        """Report NOT_SERVING, end every stream, close the listeners (the socket file is removed)."""
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        if self.gate is not None:
            self.gate.stop()  # no new connections; the open ones end with the server
        await self.server.stop(grace)
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
    try:
        api.server.add_insecure_port(f"unix:{private / 'g.sock'}")
    except RuntimeError as err:
        raise ApiStartError(f"api.socket_path: cannot bind {private / 'g.sock'}: {err}") from err
    api.gate = PeerGate(_listen_unix(path, cfg.socket_mode, gid), str(private / "g.sock"))
    api.socket_path = path
    api.policy.gate = api.gate
    return f"unix:{path}"


async def start_api_server(ledger: Ledger, cfg: ApiConfig, *, board: Board | None = None,
                           settings: PolicySettings | None = None) -> ApiServer:
    """Serve the ledger. Raises ApiStartError naming the setting that prevents it."""
    options = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_concurrent_streams", cfg.max_concurrent_rpcs),
        ("grpc.so_reuseport", 0),
        *cfg.options,
    ]
    policy = AccessPolicy(cfg, None)
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,
                             interceptors=(policy,))
    service = NodeAgentService(ledger, max_streams=cfg.max_streams,
                               bookmark_interval_s=cfg.bookmark_interval_s,
                               max_events_per_message=cfg.max_events_per_message,
                               max_message_bytes=cfg.max_message_bytes, board=board, settings=settings)
    server.add_generic_rpc_handlers((service.handler(),))
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    enable_reflection(server, (SERVICE, health_name))
    api = ApiServer(server, service, health, [], policy)
    try:
        if cfg.socket_path is not None:
            api.addresses.append(await _serve_unix(api, cfg, cfg.socket_path))
        if cfg.tcp_address is not None:
            api.addresses.append(_serve_tcp(server, cfg, cfg.tcp_address))
        await server.start()
        if api.gate is not None:
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
