"""The policy settings in force and the pipeline that runs them."""

from __future__ import annotations

from collections.abc import Callable

from qos.pipeline import Pipeline
from qos.policies import PolicyConfig
from qos.registry import NodeOutputs

Build = Callable[[PolicyConfig], Pipeline[NodeOutputs]]


class PolicySettings:
    """The YAML's settings until NodeSLO hands others (`use`, between ticks: the same event loop); the loop
    takes `pipeline` at each tick. A new pipeline has the same policy names, so their states carry over."""

    def __init__(self, settings: PolicyConfig, build: Build) -> None:
        self._build = build
        self._pipeline = build(settings)

    def use(self, settings: PolicyConfig) -> None:
        self._pipeline = self._build(settings)

    def pipeline(self) -> Pipeline[NodeOutputs]:
        return self._pipeline
