"""Settings of the metrics and health server."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from agent.config.load import ConfigError

DEFAULT_PORT = 19316  # not koordlet's 9316: both run on the host network


@dataclass(frozen=True)
class MetricsConfig:
    """Where `/metrics`, `/healthz` and `/readyz` listen, and how many per-workload series to export.

    `enabled` False means the agent does not start the server (the caller checks it).

    `bind` defaults to loopback on purpose: the prometheus-client default (0.0.0.0) would expose the port on
    the node IP of a hostNetwork pod. `port` 0 picks a free port (tests). `top_n` bounds the per-workload
    series (top N by CPU and top N by memory; 0 turns them off). `max_label_values` bounds every counter
    whose label values come from policies (holds, refusals): the rest are summed under `other`.
    `stall_intervals` is how many loop intervals without a tick turn `/healthz` red.
    `startup_grace_s` is how long `/healthz` stays green before the first tick.
    `max_connections` bounds open connections (a new one pushes out the oldest still waiting for its
    request; 503 when all are answering); `read_timeout_s` is the deadline for a request's head,
    `write_timeout_s` for taking the response.
    """

    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    top_n: int = 10
    max_label_values: int = 32
    stall_intervals: float = 3.0
    startup_grace_s: float = 60.0
    max_connections: int = 64
    read_timeout_s: float = 5.0
    write_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        self.bind_address  # noqa: B018 - validates `bind` (and the variable it names) at load
        self._check_numbers()

    @property
    def bind_address(self) -> str:
        """`bind` itself, or for `env:NAME` the IP address in environment variable NAME (the DaemonSet puts
        the node IP there from the downward API, so the port is not open on every interface)."""
        value = self.bind
        if value.startswith("env:"):
            name = value[4:]
            value = os.environ.get(name, "")
            if not value:
                raise ConfigError(f"metrics.bind: environment variable {name[:64]!r} is not set")
        try:
            ipaddress.ip_address(value)
        except ValueError as err:
            raise ConfigError(f"metrics.bind: must be an IP address or env:NAME, got {value[:64]!r}") from err
        return value

    def _check_numbers(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"metrics.port: must be in [0, 65535], got {self.port}")
        if not 0 <= self.top_n <= 1000:
            raise ConfigError(f"metrics.top_n: must be in [0, 1000], got {self.top_n}")
        if not 1 <= self.max_label_values <= 1000:
            raise ConfigError(f"metrics.max_label_values: must be in [1, 1000], got {self.max_label_values}")
        if not 1 <= self.stall_intervals <= 100:
            raise ConfigError(f"metrics.stall_intervals: must be in [1, 100], got {self.stall_intervals}")
        if not 0 <= self.startup_grace_s <= 3600:
            raise ConfigError(f"metrics.startup_grace_s: must be in [0, 3600], got {self.startup_grace_s}")
        if not 1 <= self.max_connections <= 4096:
            raise ConfigError(f"metrics.max_connections: must be in [1, 4096], got {self.max_connections}")
        if not 0.1 <= self.read_timeout_s <= 60:
            raise ConfigError(f"metrics.read_timeout_s: must be in [0.1, 60], got {self.read_timeout_s}")
        if not 0.1 <= self.write_timeout_s <= 300:
            raise ConfigError(f"metrics.write_timeout_s: must be in [0.1, 300], got {self.write_timeout_s}")
