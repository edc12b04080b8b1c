"""The pipeline that runs the policy settings in force (`agent/sources/settings.py`)."""

from __future__ import annotations

from collections.abc import Callable

from agent.sources.settings import SettingsInForce
from agent.trace.params import TickSettings
from qos.pipeline import Pipeline
from qos.policies import PolicyConfig
from qos.registry import NodeOutputs

Build = Callable[[PolicyConfig], TickSettings]


class PipelineInForce:
    """The loop takes `pipeline` at each tick: built again when the settings in force changed (between ticks:
    the same event loop). A new pipeline has the same policy names, so their states carry over. `settings` is
    what it was built from (the trace records it)."""

    def __init__(self, settings: SettingsInForce, build: Build) -> None:
        self._settings = settings
        self._build = build
        self._for = settings.policies
        self._tick_settings = build(settings.policies)
        self._pipeline = self._tick_settings.pipeline()

    def _follow(self) -> None:
        if self._settings.policies is not self._for:
            self._for = self._settings.policies
            self._tick_settings = self._build(self._for)
            self._pipeline = self._tick_settings.pipeline()

    def pipeline(self) -> Pipeline[NodeOutputs]:
        self._follow()
        return self._pipeline

    def settings(self) -> TickSettings:
        self._follow()
        return self._tick_settings
