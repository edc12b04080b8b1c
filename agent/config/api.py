"""Config of the node API (`api:`): where the gRPC server listens, who may reach it, and its limits.

Authority is decided by the socket a call comes in on, as the kubelet and containerd do it: the read socket
(`socket_path`, mode 0660 and a configurable group) serves the read methods only; the admin socket
(`admin_socket_path`, 0600 root, or 0660 with `admin_socket_group`) serves every method. TCP is served only
with TLS and required client certificates; mutations there need a certificate named in `tls_client_names`.
The transport defences are gRPC core's, set from the fields below (docs/api-access.md gives each value and
why).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import ClassVar

from agent.config.load import ConfigError
from qos.validation import bounded, check_bounds

__all__ = ["DEFAULT_ADMIN_SOCKET", "DEFAULT_SOCKET", "ApiConfig", "admin_socket_for", "is_admin_socket",
           "is_loopback"]

DEFAULT_SOCKET = "/var/run/coloc-agent/agent.sock"
DEFAULT_ADMIN_SOCKET = "/var/run/coloc-agent/admin.sock"
_ADMIN_SUFFIX = ".admin.sock"
_UDS_PATH_MAX = 107
_MAX_CALLERS = 256
_CN_MAX = 64  # ub-common-name, RFC 5280
_DAY_S = 86_400.0


@dataclass(frozen=True)
class ApiConfig:
    """Where and how the node API listens. `socket_path` None serves no read socket; `admin_socket_path`
    None puts the admin socket beside the read socket (`admin_socket_for`)."""

    socket_path: str | None = DEFAULT_SOCKET  # the read socket: GetSnapshot, Watch, GetStatus, health
    socket_group: str | None = None  # group name or numeric gid allowed to connect (and so read)
    socket_mode: int = bounded(0o660, 0, 0o777)  # a permission mode giving others nothing
    admin_socket_path: str | None = None  # every method; default: admin.sock beside socket_path
    admin_socket_group: str | None = None  # with a group, admin_socket_mode may give it access (0660)
    # the admin socket's mode: 0600 root only, 0660 with admin_socket_group
    admin_socket_mode: int = bounded(0o600, 0, 0o777)
    tcp_address: str | None = None  # e.g. "10.0.0.5:7443"; only with TLS and required client certificates
    tls_cert_file: str | None = None  # PEM server certificate (chain) for tcp_address
    tls_key_file: str | None = None  # PEM private key of tls_cert_file
    tls_client_ca_file: str | None = None  # every TCP client must present a certificate it signed
    tls_client_names: tuple[str, ...] = ()  # certificate common names that may mutate over TCP
    max_streams: int = bounded(128, 1, 100_000)  # concurrent Watch streams at most
    # the largest message, each way (grpc.max_receive/send_message_length)
    max_message_bytes: int = bounded(16 << 20, 4096, 1 << 30)
    # Per listener, streams included (grpc.aio maximum_concurrent_rpcs); above max_streams, or open watches
    # starve calls.
    max_concurrent_rpcs: int = bounded(1024, 2, 1_000_000)
    # concurrent calls per connection on the read socket (SETTINGS_MAX_CONCURRENT_STREAMS)
    max_concurrent_streams: int = bounded(16, 1, 10_000)
    # concurrent calls per connection on the admin socket and TCP (callers the agent trusts)
    admin_max_concurrent_streams: int = bounded(100, 1, 10_000)
    # the largest request headers (grpc.max_metadata_size)
    max_metadata_bytes: int = bounded(8192, 1024, 1 << 20)
    keepalive_min_interval_s: float = bounded(30.0, 1.0, 3600.0)  # pings closer than this are strikes
    max_ping_strikes: int = bounded(2, 1, 100)  # strikes allowed, then GOAWAY ENHANCE_YOUR_CALM
    keepalive_time_s: float = bounded(300.0, 10.0, _DAY_S)  # the server pings an open connection this often
    keepalive_timeout_s: float = bounded(20.0, 1.0, 600.0)  # a ping unanswered this long closes it
    # a connection with no call for this long is sent GOAWAY
    max_connection_idle_s: float = bounded(300.0, 1.0, _DAY_S)
    max_connection_age_s: float = bounded(900.0, 1.0, 30 * _DAY_S)  # every connection gets GOAWAY at this age
    # a connection sent GOAWAY for its age is closed this much later (calls still open end there)
    max_connection_age_grace_s: float = bounded(60.0, 0.0, _DAY_S)
    # the deadline for the TLS handshake and the client's HTTP/2 preface and SETTINGS
    handshake_timeout_s: float = bounded(5.0, 0.5, 120.0)
    # a Watch stream with no event gets a bookmark this often; under the scheduler's idle cut (30 s in
    # `coloc-agent recover`). A scheduler following N agents reads N / this a second: at 10,000 agents, 5 s
    # bookmarks took a tenth of its recovery.
    bookmark_interval_s: float = bounded(15.0, 0.05, 3600.0)
    # at most this many ledger events in one Watch message
    max_events_per_message: int = bounded(512, 1, 100_000)

    # Settings of earlier versions, refused with what became of them.
    RETIRED: ClassVar[dict[str, str]] = {
        "idle_stop_s": "the API server always serves",
        "options": "gRPC server options are set from the api.max_*, keepalive_* and *_timeout_s settings",
        "mutate_uids": "replaced by the admin socket: whoever can open api.admin_socket_path may mutate "
                       "(api.admin_socket_mode, api.admin_socket_group)",
        "mutate_gids": "replaced by the admin socket: give the group api.admin_socket_group with "
                       "api.admin_socket_mode 0660",
        "max_connections": "replaced by gRPC core's connection deadlines: api.handshake_timeout_s, "
                           "api.max_connection_idle_s, api.max_connection_age_s",
    }

    def __post_init__(self) -> None:
        check_bounds(self, "api", ConfigError)
        if self.socket_path is None and self.tcp_address is None:
            raise ConfigError("api: set socket_path, tcp_address, or both")
        if self.socket_path is not None:
            _check_socket_path("socket_path", self.socket_path)
            if self.admin_socket_path is None:
                object.__setattr__(self, "admin_socket_path", admin_socket_for(self.socket_path))
        if self.admin_socket_path is not None:
            _check_socket_path("admin_socket_path", self.admin_socket_path)
            if self.admin_socket_path == self.socket_path:
                raise ConfigError("api.admin_socket_path: must differ from api.socket_path (reads are served "
                                 "on one, every method on the other)")
        self._check_tls()
        _check_names(self.tls_client_names)
        _check_socket_mode("socket_mode", self.socket_mode)
        _check_socket_mode("admin_socket_mode", self.admin_socket_mode)
        if self.admin_socket_mode & 0o070 and self.admin_socket_group is None:
            raise ConfigError(f"api.admin_socket_mode: {oct(self.admin_socket_mode)} gives the group access; "
                             "name it in api.admin_socket_group (or use 0600: root only)")
        if self.max_concurrent_rpcs <= self.max_streams:
            raise ConfigError("api.max_concurrent_rpcs: must exceed max_streams (or open watches starve "
                             "calls) and be at most 1000000")

    def _check_tls(self) -> None:
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            value = getattr(self, name)
            if value is not None and not os.path.isabs(value):
                raise ConfigError(f"api.{name}: must be an absolute path, got {value[:80]!r}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("api.tls_cert_file / api.tls_key_file: set both or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ConfigError(
                "api.tls_client_ca_file: needs api.tls_cert_file (client certificates need TLS)")
        if self.tls_client_names and self.tls_client_ca_file is None:
            raise ConfigError("api.tls_client_names: needs api.tls_client_ca_file")
        if self.tcp_address is not None and (self.tls_cert_file is None or self.tls_client_ca_file is None):
            where = "a loopback address" if is_loopback(self.tcp_address) else "not a loopback address"
            raise ConfigError(f"api.tcp_address: {self.tcp_address} ({where}) is served only with TLS and "
                             "required client certificates — set api.tls_cert_file, api.tls_key_file and "
                             "api.tls_client_ca_file, or use the unix sockets")


def admin_socket_for(socket_path: str) -> str:
    """The admin socket beside a read socket: `admin.sock` beside `agent.sock`; `<name>.admin.sock` beside
    any other `<name>.sock` (so agents sharing a directory get one each)."""
    head, name = os.path.split(socket_path)
    if name == "agent.sock":
        return os.path.join(head, "admin.sock")
    return os.path.join(head, name.removesuffix(".sock") + _ADMIN_SUFFIX)


def is_admin_socket(path: str) -> bool:
    """A file name `admin_socket_for` gives."""
    name = os.path.basename(path)
    return name == "admin.sock" or name.endswith(_ADMIN_SUFFIX)


def is_loopback(address: str) -> bool:
    """`host:port` whose host is a loopback address or `localhost`."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_socket_path(name: str, path: str) -> None:
    if not os.path.isabs(path):
        raise ConfigError(f"api.{name}: must be absolute, got {path[:80]!r}")
    if len(os.fsencode(path)) > _UDS_PATH_MAX:
        raise ConfigError(f"api.{name}: longer than {_UDS_PATH_MAX} bytes (unix socket limit)")


def _check_names(names: tuple[str, ...]) -> None:
    """Certificate names that may mutate: a bounded list, each as X.509 allows."""
    if len(names) > _MAX_CALLERS:
        raise ConfigError(f"api.tls_client_names: at most {_MAX_CALLERS} entries, got {len(names)}")
    for name in names:
        if not 1 <= len(name) <= _CN_MAX:
            raise ConfigError(f"api.tls_client_names: each must be 1-{_CN_MAX} characters (an X.509 common "
                             f"name), got {name[:80]!r}")


def _check_socket_mode(name: str, mode: int) -> None:
    if mode & 0o007:  # anyone on the node could call the API
        raise ConfigError(f"api.{name}: must give others no access, got {oct(mode)}")
