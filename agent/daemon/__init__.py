"""The running agent: the collector, the tick loop and the wiring that builds them from the config."""

from agent.daemon.loop import TickLoop
from agent.daemon.runtime import Runtime, build

__all__ = ["Runtime", "TickLoop", "build"]
