"""Settings of the metrics and health server."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from agent.config.load import ConfigError
from qos.validation import bounded, check_bounds, check_choices

DEFAULT_PORT = 19316  # not koordlet's 9316: both run on the host network


@dataclass(frozen=True)
class MetricsConfig:
    """Where `/metrics`, `/healthz` and `/readyz` listen, and how many per-workload series to export.

    `enabled` False means the agent does not start the server (the caller checks it).

    `bind` defaults to loopback on purpose: the prometheus-client default (0.0.0.0) would expose the port on
    the node IP of a hostNetwork pod. `port` 0 picks a free port (tests). `top_n` bounds the per-workload
    series (top N by CPU, by memory and by disk IO; 0 turns them off). `max_label_values` bounds the
    counters whose label values come from records (admission refusals, actions): the rest are summed under
    `other` (holds are counted by a fixed set of reason codes and need no bound).
    `stall_intervals` is how many loop intervals without a tick turn `/healthz` red.
    `startup_grace_s` is how long `/healthz` stays green before the first tick.
    `max_connections` bounds open connections (a new one pushes out the oldest still waiting for its
    request; 503 when all are answering); `read_timeout_s` is the deadline for a request's head,
    `write_timeout_s` for taking the response.
    """

    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = bounded(DEFAULT_PORT, 0, 65535)
    top_n: int = bounded(10, 0, 1000)
    max_label_values: int = bounded(32, 1, 1000)
    stall_intervals: float = bounded(3.0, 1.0, 100.0)
    startup_grace_s: float = bounded(60.0, 0.0, 3600.0)
    max_connections: int = bounded(64, 1, 4096)
    read_timeout_s: float = bounded(5.0, 0.1, 60.0)
    write_timeout_s: float = bounded(10.0, 0.1, 300.0)  # the deadline for a client to take a response

    def __post_init__(self) -> None:
        self.bind_address  # noqa: B018 - validates `bind` (and the variable it names) at load
        check_choices(self, "metrics", ConfigError)
        check_bounds(self, "metrics", ConfigError)

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
