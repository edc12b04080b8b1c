"""Config of BE egress bandwidth control (`network:`): the device, the link capacity, the policy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from agent.config.load import ConfigError
from qos.network import NetworkPolicyConfig
from qos.validation import bounded, check_bounds, check_choices

__all__ = ["NetworkConfig"]

_IFNAME = re.compile(r"^[^\s/:]{1,15}$")  # IFNAMSIZ - 1, no slash, colon or space (the kernel's rules)
_NETNS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_LINK_MBIT = 1_000_000.0


@dataclass(frozen=True)
class NetworkConfig:
    """HTB egress control of BE pods' traffic on one device. Off by default.

    `link_mbit` is the capacity the HTB link class gets: set it from the real line rate (a little below it,
    so the queue forms in HTB and not in the NIC); it is never guessed from the device, whose reported speed
    is meaningless on veth, bonds and virtual NICs. `netns` names a network namespace under /run/netns (tests
    and benchmarks); "" is the agent's own. `own_device`: replace a root qdisc another component installed;
    off, a foreign root is reported and left alone. `remove_on_exit`: delete our tree at shutdown. `leaf`:
    the leaf qdisc under the HP and BE classes when the kernel has it (else HTB's default pfifo). `poll_s`:
    how often the class counters are read. `yarn_cgroup2`: a cgroup2 directory (relative to the cgroup2
    mount, e.g. `hadoop-yarn`) whose sockets are BE whatever their address (YARN containers share the host's);
    "" classifies none by cgroup.
    """

    enabled: bool = False  # shape BE pods' egress with HTB on `device`
    device: str = ""  # the network interface whose egress is shaped (required when on)
    netns: str = ""
    link_mbit: float = bounded(0.0, 0.0, MAX_LINK_MBIT)  # above 0 when on
    own_device: bool = False
    remove_on_exit: bool = True
    leaf: Literal["fq_codel", "none"] = "fq_codel"
    poll_s: float = bounded(0.25, 0.01, 60.0)
    yarn_cgroup2: str = ""
    policy: NetworkPolicyConfig = field(default_factory=NetworkPolicyConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, NetworkPolicyConfig):
            raise ConfigError("network.policy: must be a mapping")
        check_choices(self, "network", ConfigError)
        check_bounds(self, "network", ConfigError)
        if self.netns and not _NETNS.match(self.netns):
            raise ConfigError(f"network.netns: not a namespace name, got {self.netns!r}")
        parts = self.yarn_cgroup2.strip("/").split("/")
        if self.yarn_cgroup2 and any(p in ("", ".", "..") for p in parts):
            raise ConfigError(f"network.yarn_cgroup2: must be a relative path without '.' or '..', "
                              f"got {self.yarn_cgroup2!r}")
        if not self.enabled:
            return
        if not _IFNAME.match(self.device):
            raise ConfigError(f"network.device: must be an interface name (1-15 characters, no '/', ':' or "
                              f"space), got {self.device!r}")
        if self.link_mbit == 0:
            raise ConfigError(f"network.link_mbit: must be in (0, {MAX_LINK_MBIT:g}] when network control "
                              f"is on (the link capacity is never guessed from the device), "
                              f"got {self.link_mbit}")

    @property
    def link_bps(self) -> int:
        return int(self.link_mbit * 1_000_000) // 8 * 8
