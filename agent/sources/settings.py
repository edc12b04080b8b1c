"""The settings in force: the YAML's until the node's NodeSLO gives others, where it is read.

One object, made by the runtime with the YAML's settings, fed by the NodeSLO source (`use`,
`use_resource_qos`, `read`: the same event loop, between ticks), read by the loop (its pipeline is built
from `policies`), by the API and `status` (`view`), by the batch limits (`policies.suppression`) and by the
memory QoS / CPU burst runner (`resource_qos`, `known`).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.sources.nodeslo_map import ResourceQos, settings_sources
from qos.policies import PolicyConfig


class SettingsInForce:
    def __init__(self, policies: PolicyConfig, resource_qos: ResourceQos, *, nodeslo: bool,
                 file_keys: frozenset[str] | None = None) -> None:
        self.yaml = policies  # the fallback of every setting the NodeSLO does not give
        self.yaml_resource_qos = resource_qos
        self.policies = policies
        # policy setting -> "default" | "yaml" (`file_keys`: the keys the config file set) | "NodeSLO"
        self.yaml_sources: Mapping[str, str] = settings_sources(policies, file_keys)
        self.sources: Mapping[str, str] = self.yaml_sources
        self.resource_qos = resource_qos
        # Whether the settings are known: the NodeSLO read once (or found absent), where it is on. Until then
        # memory QoS and CPU burst plan nothing (their values would be given back for a pass).
        self.known = not nodeslo

    def use(self, policies: PolicyConfig, sources: Mapping[str, str]) -> None:
        self.policies, self.sources = policies, dict(sources)

    def use_resource_qos(self, resource_qos: ResourceQos) -> None:
        self.resource_qos = resource_qos

    def read(self) -> None:
        """The NodeSLO was read (or found absent) once."""
        self.known = True

    def view(self) -> tuple[PolicyConfig, Mapping[str, str]]:
        """The policy settings in force and where each came from: what `status` shows."""
        return self.policies, self.sources

    def source_map(self) -> Mapping[str, str]:
        return dict(self.sources)
