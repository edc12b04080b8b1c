"""Config of the node API (`api:`): where and how the gRPC server listens."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["DEFAULT_SOCKET", "ApiConfig"]

DEFAULT_SOCKET = "/var/run/coloc-agent/agent.sock"
_UDS_PATH_MAX = 107


@dataclass(frozen=True)
class ApiConfig:
    """Where and how the node API listens. `socket_path` None serves no unix socket (TCP only)."""

    socket_path: str | None = DEFAULT_SOCKET
    socket_group: str | None = None  # group name or numeric gid allowed to connect
    socket_mode: int = 0o660
    tcp_address: str | None = None  # e.g. "127.0.0.1:7443"; only when asked
    max_streams: int = 128  # concurrent Watch streams
    max_message_bytes: int = 16 << 20
    max_concurrent_rpcs: int = 1024  # everything in flight, streams included
    bookmark_interval_s: float = 5.0
    max_events_per_message: int = 512
    options: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.socket_path is None and self.tcp_address is None:
            raise ValueError("api: set socket_path, tcp_address, or both")
        if self.socket_path is not None:
            if not os.path.isabs(self.socket_path):
                raise ValueError(f"api.socket_path: must be absolute, got {self.socket_path!r}")
            if len(os.fsencode(self.socket_path)) > _UDS_PATH_MAX:
                raise ValueError(f"api.socket_path: longer than {_UDS_PATH_MAX} bytes (unix socket limit)")
        if not 0 <= self.socket_mode <= 0o777:
            raise ValueError(f"api.socket_mode: must be a permission mode, got {oct(self.socket_mode)}")
        if not 1 <= self.max_streams <= 100_000:
            raise ValueError(f"api.max_streams: must be in [1, 100000], got {self.max_streams}")
        if self.max_concurrent_rpcs <= self.max_streams:
            raise ValueError("api.max_concurrent_rpcs: must exceed max_streams, or open watches starve calls")
        if not 4096 <= self.max_message_bytes <= 1 << 30:
            raise ValueError(f"api.max_message_bytes: must be in [4096, 2^30], got {self.max_message_bytes}")
        if not 0.05 <= self.bookmark_interval_s <= 3600:
            raise ValueError(f"api.bookmark_interval_s: must be in [0.05, 3600], "
                             f"got {self.bookmark_interval_s}")
        if not 1 <= self.max_events_per_message <= 100_000:
            raise ValueError("api.max_events_per_message: must be in [1, 100000]")
