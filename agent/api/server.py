"""The gRPC server: `coloc.v1.NodeAgent`, health and reflection, on a unix socket (TCP only when asked).

The socket file gets its mode and group between bind and start, so there is no window in which it is
reachable with looser permissions; its directory is created 0750. Authorisation is file permissions.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import logging
import os
import socket
import stat
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection

from agent.api.service import SERVICE, NodeAgentService
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
                 health: health_aio.HealthServicer, addresses: list[str]) -> None:
        self.server = server
        self.service = service
        self.health = health
        self.addresses = addresses

    @property
    def address(self) -> str:
        return self.addresses[0]

    async def stop(self, grace: float | None = 1.0) -> None:
        """Report NOT_SERVING, end every stream, close the listeners (the socket file is removed)."""
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_api_server(ledger: Ledger, cfg: ApiConfig, *, board: Board | None = None) -> ApiServer:
    """Serve the ledger. Raises ApiStartError naming the setting that prevents it."""
    options = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_concurrent_streams", cfg.max_concurrent_rpcs),
        ("grpc.so_reuseport", 0),
        *cfg.options,
    ]
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=cfg.max_concurrent_rpcs)
    service = NodeAgentService(ledger, max_streams=cfg.max_streams,
                               bookmark_interval_s=cfg.bookmark_interval_s,
                               max_events_per_message=cfg.max_events_per_message,
                               max_message_bytes=cfg.max_message_bytes, board=board)
    server.add_generic_rpc_handlers((service.handler(),))
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection((SERVICE, health_name, reflection.SERVICE_NAME), server)
    addresses: list[str] = []
    if cfg.socket_path is not None:
        path = Path(cfg.socket_path)
        gid = _gid(cfg.socket_group) if cfg.socket_group else None
        try:
            _prepare_socket_path(path, gid)
        except OSError as err:
            raise ApiStartError(f"api.socket_path: {path}: {err.strerror}") from err
        try:
            server.add_insecure_port(f"unix:{path}")
        except RuntimeError as err:
            raise ApiStartError(f"api.socket_path: cannot bind {path}: {err}") from err
        # Between bind and start: nobody can have connected yet.
        os.chmod(path, cfg.socket_mode)
        if gid is not None:
            os.chown(path, -1, gid)
        addresses.append(f"unix:{path}")
    if cfg.tcp_address is not None:
        try:
            port = server.add_insecure_port(cfg.tcp_address)
        except RuntimeError as err:
            raise ApiStartError(f"api.tcp_address: cannot bind {cfg.tcp_address}: {err}") from err
        host = cfg.tcp_address.rsplit(":", 1)[0]
        addresses.append(f"{host}:{port}")
    await server.start()
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("node API serving", extra={"fields": {"addresses": addresses}})
    return ApiServer(server, service, health, addresses)
