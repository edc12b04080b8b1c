"""Config of the disk guard (`io:`): which disks, how often they are read, the policy (`qos.io`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.config.load import ConfigError
from cgroups.errors import InvalidValue
from cgroups.io import check_device
from qos.io import IoPolicyConfig
from qos.validation import bounded, check_bounds, check_choices

__all__ = ["DEFAULT_PATHS", "IoConfig"]

DEFAULT_PATHS = (
    "/var/lib/kubelet",  # the kubelet's root dir: emptyDir volumes, logs
    "/var/lib/containerd", "/var/lib/docker", "/var/lib/containers",  # the container runtimes' storage
    "/var/lib/hadoop-yarn",  # where packaged NodeManagers keep yarn.nodemanager.local-dirs
)


@dataclass(frozen=True)
class IoConfig:
    """BE disk IO held back while HP needs the disk. On by default: it acts only while HP waits for IO.

    `devices`: the disks to guard, as `MAJ:MIN`; empty: the disks behind `paths` (those that exist; virtual
    devices and what has no disk under it are skipped). List YARN's `yarn.nodemanager.local-dirs` in `paths`
    where they are elsewhere. `host_root`: where the host's root is seen from the agent, put before each path
    (a DaemonSet pod: `/host`, with the host's `/var/lib` mounted read-only at `/host/var/lib`). `poll_s`: how
    often the counters are read between ticks while BE does more IO than its floor on a guarded disk (a tick
    is woken when HP starts waiting or goes idle). `calm_poll_s`: how often the counters are read otherwise.
    `window_s`: the window rates are taken over. `stall_window_s`: the window HP's IO pressure is taken over
    (`io.policy.stall_percent` of it is need). `hp_psi_cgroups`: how many HP cgroups' IO pressure is read,
    the busiest on the disk first.
    """

    enabled: bool = True  # hold BE's disk IO back while HP waits for the disk
    devices: tuple[str, ...] = ()
    paths: tuple[str, ...] = DEFAULT_PATHS  # directories whose disks are guarded when `devices` is empty
    host_root: str = ""
    poll_s: float = bounded(0.02, 0.01, 10.0)
    window_s: float = bounded(0.3, 0.05, 10.0)
    stall_window_s: float = bounded(0.1, 0.01, 10.0)
    calm_poll_s: float = bounded(0.1, 0.01, 10.0)
    hp_psi_cgroups: int = bounded(16, 1, 1024)
    policy: IoPolicyConfig = field(default_factory=IoPolicyConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, IoPolicyConfig):
            raise ConfigError("io.policy: must be a mapping")
        check_choices(self, "io", ConfigError)
        check_bounds(self, "io", ConfigError)
        for n, dev in enumerate(self.devices):
            try:
                check_device(dev)
            except InvalidValue as err:
                raise ConfigError(f"io.devices[{n}]: {err}") from None
        for n, p in enumerate(self.paths):
            if not isinstance(p, str) or not p.startswith("/"):
                raise ConfigError(f"io.paths[{n}]: must be an absolute path, got {p!r}")
        if self.host_root and (not self.host_root.startswith("/") or ".." in self.host_root.split("/")):
            raise ConfigError(f"io.host_root: must be an absolute path without '..', got {self.host_root!r}")
        if self.window_s < self.poll_s:
            raise ConfigError(f"io.window_s: must be >= io.poll_s ({self.poll_s:g}), got {self.window_s:g}")
        if self.calm_poll_s < self.poll_s:
            raise ConfigError(f"io.calm_poll_s: must be >= io.poll_s ({self.poll_s:g}), "
                              f"got {self.calm_poll_s:g}")
        if not self.poll_s <= self.stall_window_s <= self.window_s:
            raise ConfigError(f"io.stall_window_s: must be in [io.poll_s, io.window_s] ({self.poll_s:g}, "
                              f"{self.window_s:g}), got {self.stall_window_s:g}")
