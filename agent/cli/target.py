"""Where the commands that talk to a running agent (`status`, `top`) find it: `--socket` / `--url`, else the
agent's config file (`--config`: `api.socket_path`, `metrics.bind` and `metrics.port`), else the defaults;
and the one line they print when no agent answers there."""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass

from agent.config.agent import load_config
from agent.config.api import DEFAULT_SOCKET
from agent.config.metrics import DEFAULT_PORT

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
POINT = "point at one with --socket PATH or --config FILE (the agent's config)"
POINT_TOP = "point at one with --url URL, --socket PATH or --config FILE (the agent's config)"


@dataclass(frozen=True)
class Target:
    """A running agent's read socket (None: the config serves none) and `/metrics` base URL (None: why not,
    in `no_metrics`)."""

    socket: str | None
    url: str | None
    no_metrics: str = ""


def add_config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="the agent's YAML config: its api.socket_path and metrics.bind/port are used "
                        "(--socket and --url win over it)")


def from_config(path: str) -> Target:
    """The socket and `/metrics` URL an agent running with config file `path` serves. Raises ConfigError."""
    cfg = load_config(path)
    m = cfg.metrics
    if not m.enabled:
        return Target(cfg.api.socket_path, None,
                      f"{path} turns /metrics off (metrics.enabled: false), which top reads; pass --url")
    if m.port == 0:
        return Target(cfg.api.socket_path, None, f"{path} lets the agent pick its metrics port "
                                                 "(metrics.port: 0); pass --url")
    host = m.bind_address
    if ipaddress.ip_address(host).is_unspecified:  # bound to every address: ask over loopback
        host = "::1" if ":" in host else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return Target(cfg.api.socket_path, f"http://{host}:{m.port}")


def resolve(socket: str | None, url: str | None, config: str | None) -> Target:
    """`--socket` and `--url` as given, the rest from `--config` (when given), else the defaults."""
    base = from_config(config) if config is not None else Target(DEFAULT_SOCKET, DEFAULT_URL)
    return Target(socket if socket is not None else base.socket,
                  url if url is not None else base.url,
                  "" if url is not None else base.no_metrics)


def socket_state(address: str) -> str:
    """Why nothing answers at `address`, as far as the file system tells: the socket file is not there, or
    nothing listens on it."""
    path = address.removeprefix("unix://").removeprefix("unix:")
    if "/" in path or path.endswith(".sock"):
        path = os.path.abspath(path)
        if not os.path.exists(path):
            return "no such socket"
        return "connection refused" if os.access(path, os.W_OK) else "permission denied"
    return "not reachable"


def no_agent(address: str, why: str, point: str = POINT) -> str:
    """The one line for an agent that does not answer at `address`."""
    return f"no agent answers at {address} ({why}); {point}"


__all__ = ["DEFAULT_URL", "POINT", "POINT_TOP", "Target", "add_config_option", "from_config",
           "no_agent", "resolve", "socket_state"]
