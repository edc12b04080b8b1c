"""Disk QoS as Koordinator's NodeSLO gives it (`resourceQOSStrategy.<class>.blkioQOS`, koordlet's
`BlkIOQOSCfg`), and what of it the agent acts on. Pure: no I/O.

koordlet (`pkg/koordlet/qosmanager/plugins/blkio/blkio_reconcile.go`, behind its `BlkIOReconcile` feature
gate, cgroup v1 only) reads two places. The BE class: each block caps the BE tier on its disk through
`blkio.throttle.{read,write}_{bps,iops}_device` (0 or absent: no cap) and sets `blkio.cost.weight` from
`ioWeightPercent` (default 100); `enable: false`, or a disk no block names any more, lifts the caps.
`cgroupRoot`: blk-iocost's `blkio.cost.qos` (latencies, default 3000 µs at the 95th percentile) and
`blkio.cost.model` (the user model) of the root. LSR and LS blocks only get a warning, the system class is
not read, and latencies and the model are read only under `cgroupRoot`. A block is a `device` (`/dev/vdb`,
or a partition: its disk), an LVM `volumegroup` (the disk of its one physical volume) or a `podvolume` (a
volume of the pod whose own `koordinator.sh/blkioQOS` annotation names it; in a class, koordlet refuses the
class's whole update).

The agent acts on the four caps of the BE class's `device` blocks (`be_device_caps`); `unsupported` names the
rest in plain words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qos.model import NO_CAP, IoCap

KINDS = ("device", "podvolume", "volumegroup")
CLASS_KEYS = {"lsr": "lsrClass", "ls": "lsClass", "be": "beClass", "system": "systemClass",
              "root": "cgroupRoot"}
DEFAULT_WEIGHT_PERCENT = 100  # koordlet's DefaultIOWeightPercentage: what it writes for an unset weight


@dataclass(frozen=True, slots=True)
class BlkioBlock:
    """One entry of a class's `blocks`: its `name` and `type` (`kind`), the caps of its `ioCfg` and, as given
    (None: not), the fields the agent does not act on."""

    name: str
    kind: str
    limit: IoCap = NO_CAP
    weight_percent: int | None = None
    read_latency_us: int | None = None
    write_latency_us: int | None = None
    read_latency_percent: int | None = None
    write_latency_percent: int | None = None
    user_model: bool | None = None
    model: tuple[tuple[str, int], ...] = ()  # the `model*` fields given: (NodeSLO name, value)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"block type: must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.weight_percent is not None and not 1 <= self.weight_percent <= 100:
            raise ValueError(f"ioWeightPercent: must be from 1 to 100, got {self.weight_percent!r}")

    def iocost_fields(self) -> tuple[str, ...]:
        """The NodeSLO names of the blk-iocost fields given (latencies, percentiles, the user model)."""
        given = [name for name, v in (("readLatency", self.read_latency_us),
                                      ("writeLatency", self.write_latency_us),
                                      ("readLatencyPercent", self.read_latency_percent),
                                      ("writeLatencyPercent", self.write_latency_percent),
                                      ("enableUserModel", self.user_model)) if v is not None]
        return (*given, *(name for name, _ in self.model))


@dataclass(frozen=True, slots=True)
class BlkioQosClass:
    """One class's `blkioQOS`: koord-manager's default is off with no blocks (`NoneBlkIOQOS`)."""

    enable: bool = False
    blocks: tuple[BlkioBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class BlkioQosSettings:
    """`resourceQOSStrategy.{lsr,ls,be,system}Class.blkioQOS` and `cgroupRoot.blkioQOS` (`root`)."""

    lsr: BlkioQosClass = field(default_factory=BlkioQosClass)
    ls: BlkioQosClass = field(default_factory=BlkioQosClass)
    be: BlkioQosClass = field(default_factory=BlkioQosClass)
    system: BlkioQosClass = field(default_factory=BlkioQosClass)
    root: BlkioQosClass = field(default_factory=BlkioQosClass)


def be_device_caps(settings: BlkioQosSettings) -> dict[str, IoCap]:
    """The BE tier's static caps per device `name` (e.g. /dev/vdb) while the BE class is enabled; a device
    named twice takes the later block's, as koordlet's writes in order do."""
    if not settings.be.enable:
        return {}
    return {b.name: b.limit for b in settings.be.blocks if b.kind == "device"}


def unsupported(settings: BlkioQosSettings) -> list[str]:
    """Each enabled block or field the agent does not act on, and why, in plain words."""
    out = []
    for cls in ("lsr", "ls", "system"):
        cfg: BlkioQosClass = getattr(settings, cls)
        if cfg.enable and cfg.blocks:
            out.append(f"{CLASS_KEYS[cls]}.blkioQOS: {len(cfg.blocks)} block(s) not acted on: disk QoS "
                       "is set for the BE class only (koordlet too: it warns for LSR and LS, and ignores "
                       "system)")
    if settings.root.enable:
        for i, b in enumerate(settings.root.blocks):
            out.append(f"cgroupRoot.blkioQOS.blocks[{i}] ({b.kind} {b.name}): not acted on: blk-iocost's "
                       "latency targets and cost model (blkio.cost.qos and blkio.cost.model, a kernel of "
                       "Alibaba Cloud Linux) are not set")
    if not settings.be.enable:
        return out
    for i, b in enumerate(settings.be.blocks):
        where = f"beClass.blkioQOS.blocks[{i}] ({b.kind} {b.name})"
        if b.kind == "podvolume":
            out.append(f"{where}: not acted on: a pod volume belongs in the pod's own "
                       "koordinator.sh/blkioQOS annotation (for one in the NodeSLO koordlet applies none of "
                       "the BE class's blocks; the agent still applies its device blocks)")
            continue
        if b.kind == "volumegroup":
            out.append(f"{where}: not acted on: an LVM volume group is not resolved to its disk (koordlet "
                       "caps the disk of its one physical volume)")
            continue
        if b.weight_percent is not None and b.weight_percent != DEFAULT_WEIGHT_PERCENT:
            out.append(f"{where}: ioWeightPercent {b.weight_percent} not acted on: blk-iocost weights "
                       "(blkio.cost.weight, a kernel of Alibaba Cloud Linux) are not set")
        if iocost := b.iocost_fields():
            out.append(f"{where}: {', '.join(iocost)} ignored: koordlet reads them only under cgroupRoot")
    return out
