"""What a run may leave on the node for BE (`agent/state/held_record.py`): CPU suppression on the tier
(`<state>.besuppress`) and an egress tree (`<state>.egress`, below).

The suppression mark (the tier's cgroup) is written at start by a run that suppresses, cleared once a clean
exit has released the tier. A run that finds it for its own tier, in this boot, with suppression turned off,
releases the tier at its first tick (`ActionExecutor.release_left`): a SIGKILLed or OOM-killed agent releases
nothing, and without the mark a run with suppression off never writes the tier: BE stayed confined for good.
The egress record works the same way for a tree on a device (`agent/daemon/egress_left.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.config.load import ConfigError
from agent.config.network import NetworkConfig
from agent.state.held_record import HeldRecord, checked_rel


class SuppressionCodec:
    format = "coloc-agent/be-suppression/v1"
    key = "tier"
    what = "BE CPU suppression"

    def empty(self) -> str | None:
        return None

    def encode(self, value: str | None) -> Any:
        return value

    def decode(self, payload: Any) -> str | None:
        return None if payload is None else checked_rel(payload, "tier")


def suppression_record(state_path: str | Path, boot_id: str) -> HeldRecord[str | None]:
    """`<state file>.besuppress`."""
    return HeldRecord(state_path, "besuppress", boot_id, SuppressionCodec())


class EgressCodec:
    """Where a run shaped egress: the device, its netns and the YARN cgroup2 directory (a NetworkConfig's
    own fields, checked as the config checks them), or null."""

    format = "coloc-agent/egress/v1"
    key = "egress"
    what = "egress tree"

    def empty(self) -> NetworkConfig | None:
        return None

    def encode(self, value: NetworkConfig | None) -> Any:
        if value is None:
            return None
        return {"device": value.device, "netns": value.netns, "yarn_cgroup2": value.yarn_cgroup2}

    def decode(self, payload: Any) -> NetworkConfig | None:
        if payload is None:
            return None
        if not isinstance(payload, dict) or set(payload) != {"device", "netns", "yarn_cgroup2"}:
            raise ValueError("egress: must be null or an object with device, netns, yarn_cgroup2")
        try:  # the record can only name what a config could: an interface name, a netns name, a cgroup2 path
            return NetworkConfig(enabled=True, device=payload["device"], netns=payload["netns"],
                                 link_mbit=1.0, leaf="none", yarn_cgroup2=payload["yarn_cgroup2"])
        except (ConfigError, TypeError, AttributeError) as err:
            raise ValueError(f"egress: {err}") from None


def egress_record(state_path: str | Path, boot_id: str) -> HeldRecord[NetworkConfig | None]:
    """`<state file>.egress`: written at start by a run that shapes egress, cleared once its tree is gone."""
    return HeldRecord(state_path, "egress", boot_id, EgressCodec())
