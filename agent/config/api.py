"""Config of the node API (`api:`): where and how the gRPC server listens."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["DEFAULT_SOCKET", "ApiConfig", "is_loopback"]

DEFAULT_SOCKET = "/var/run/coloc-agent/agent.sock"
_UDS_PATH_MAX = 107
_MAX_CALLERS = 256
_CN_MAX = 64  # ub-common-name, RFC 5280


@dataclass(frozen=True)
class ApiConfig:
    """Where and how the node API listens. `socket_path` None serves no unix socket (TCP only)."""

    socket_path: str | None = DEFAULT_SOCKET
    socket_group: str | None = None  # group name or numeric gid allowed to connect
    socket_mode: int = 0o660
    tcp_address: str | None = None  # e.g. "127.0.0.1:7443"; only when asked; TLS required off loopback
    mutate_uids: tuple[int, ...] = (0,)  # unix peers allowed Admit/AckRecovery/Drain/Recommission
    mutate_gids: tuple[int, ...] = ()  # ... or whose primary gid is one of these
    tls_cert_file: str | None = None  # PEM server certificate (chain) for tcp_address
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None  # TCP clients must present a certificate it signed; they may mutate
    tls_client_names: tuple[str, ...] = ()  # ... and only these common names, when set
    max_streams: int = 128  # concurrent Watch streams
    max_message_bytes: int = 16 << 20
    max_concurrent_rpcs: int = 1024  # everything in flight, streams included
    max_connections: int = 4096  # open at once; one more is closed at once (each holds a descriptor)
    bookmark_interval_s: float = 5.0
    max_events_per_message: int = 512

    # Settings of earlier versions, refused with what became of them.
    RETIRED: ClassVar[dict[str, str]] = {
        "idle_stop_s": "the API server (grpclib) has no idle cost to stop; it always serves",
        "options": "grpcio server options; the server is grpclib, whose limits are the api.max_* settings",
    }

    def __post_init__(self) -> None:
        if self.socket_path is None and self.tcp_address is None:
            raise ValueError("api: set socket_path, tcp_address, or both")
        if self.socket_path is not None:
            if not os.path.isabs(self.socket_path):
                raise ValueError(f"api.socket_path: must be absolute, got {self.socket_path!r}")
            if len(os.fsencode(self.socket_path)) > _UDS_PATH_MAX:
                raise ValueError(f"api.socket_path: longer than {_UDS_PATH_MAX} bytes (unix socket limit)")
        self._check_tls()
        _check_callers(self.mutate_uids, self.mutate_gids, self.tls_client_names)
        _check_socket_mode(self.socket_mode)
        if not 1 <= self.max_streams <= 100_000:
            raise ValueError(f"api.max_streams: must be in [1, 100000], got {self.max_streams}")
        if not self.max_streams < self.max_concurrent_rpcs <= 1_000_000:
            raise ValueError("api.max_concurrent_rpcs: must exceed max_streams (or open watches starve "
                             "calls) and be at most 1000000")
        if not 1 <= self.max_connections <= 1_000_000:
            raise ValueError(f"api.max_connections: must be in [1, 1000000], got {self.max_connections}")
        if not 4096 <= self.max_message_bytes <= 1 << 30:
            raise ValueError(f"api.max_message_bytes: must be in [4096, 2^30], got {self.max_message_bytes}")
        if not 0.05 <= self.bookmark_interval_s <= 3600:
            raise ValueError(f"api.bookmark_interval_s: must be in [0.05, 3600], "
                             f"got {self.bookmark_interval_s}")
        if not 1 <= self.max_events_per_message <= 100_000:
            raise ValueError("api.max_events_per_message: must be in [1, 100000]")

    def _check_tls(self) -> None:
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            value = getattr(self, name)
            if value is not None and not os.path.isabs(value):
                raise ValueError(f"api.{name}: must be an absolute path, got {value[:80]!r}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("api.tls_cert_file / api.tls_key_file: set both or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("api.tls_client_ca_file: needs api.tls_cert_file (client certificates need TLS)")
        if self.tls_client_names and self.tls_client_ca_file is None:
            raise ValueError("api.tls_client_names: needs api.tls_client_ca_file")
        if any(not 0 <= n < 1 << 32 for n in (*self.mutate_uids, *self.mutate_gids)):
            raise ValueError("api.mutate_uids / api.mutate_gids: must be uids/gids in [0, 2^32)")
        if self.tcp_address is not None and self.tls_cert_file is None and not is_loopback(self.tcp_address):
            raise ValueError(f"api.tcp_address: {self.tcp_address} is not a loopback address; serving it "
                             "without TLS would let anyone on the network reach the API — set "
                             "api.tls_cert_file and api.tls_key_file, or bind 127.0.0.1")


def is_loopback(address: str) -> bool:
    """`host:port` whose host is a loopback address or `localhost`."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_callers(uids: tuple[int, ...], gids: tuple[int, ...], names: tuple[str, ...]) -> None:
    """Who may mutate: bounded lists (an allow-list is a few ids), certificate names as X.509 allows."""
    for field_name, items in (("mutate_uids", uids), ("mutate_gids", gids), ("tls_client_names", names)):
        if len(items) > _MAX_CALLERS:
            raise ValueError(f"api.{field_name}: at most {_MAX_CALLERS} entries, got {len(items)}")
    for name in names:
        if not 1 <= len(name) <= _CN_MAX:
            raise ValueError(f"api.tls_client_names: each must be 1-{_CN_MAX} characters (an X.509 common "
                             f"name), got {name[:80]!r}")


def _check_socket_mode(mode: int) -> None:
    if not 0 <= mode <= 0o777:
        raise ValueError(f"api.socket_mode: must be a permission mode, got {str(mode)[:24]}")
    if mode & 0o007:  # anyone on the node could call the API
        raise ValueError(f"api.socket_mode: must give others no access, got {oct(mode)}")
