"""Prometheus metrics, health endpoints and the observer the loop feeds."""

from agent.config.metrics import DEFAULT_PORT, MetricsConfig
from agent.metrics.health import HealthConfig
from agent.metrics.hub import MetricsHub
from agent.metrics.ledger import LedgerFigures
from agent.metrics.server import MetricsServer
from agent.metrics.tally import ActionTally

__all__ = [
    "DEFAULT_PORT",
    "ActionTally",
    "HealthConfig",
    "LedgerFigures",
    "MetricsConfig",
    "MetricsHub",
    "MetricsServer",
]
