"""Disk IO of a cgroup, per block device: caps (v2 `io.max`, v1 `blkio.throttle.*_device`), usage (v2
`io.stat`, v1 `blkio.throttle.io_service_bytes_recursive` / `io_serviced_recursive`), and the devices that
back a directory.

A device is named as the kernel names it in these files, `MAJ:MIN`, and is always a whole disk: the kernel's
throttling acts on a disk's request queue (a partition's number is refused). v1 charges direct IO only to the
cgroup (buffered writeback is issued by flusher threads, unattributed); v2 charges writeback to the cgroup
that dirtied the pages.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cgroups.errors import InvalidValue, UnknownFormat

_DEVICE = re.compile(r"^[0-9]{1,9}:[0-9]{1,9}$")
SYS_DEV_BLOCK = Path("/sys/dev/block")
V1_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
            "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")
V2_KEYS = ("rbps", "wbps", "riops", "wiops")


def check_device(dev: object) -> str:
    """`dev` if it is a `MAJ:MIN` device number; InvalidValue naming it otherwise."""
    if not isinstance(dev, str) or not _DEVICE.fullmatch(dev):
        raise InvalidValue(f"block device must be MAJ:MIN (e.g. 8:0), got {str(dev)[:40]!r}")
    return dev


@dataclass(frozen=True, slots=True)
class IoLimit:
    """Caps on one device (None: none): bytes/s read and written, IOs/s read and written."""

    rbps: int | None = None
    wbps: int | None = None
    riops: int | None = None
    wiops: int | None = None

    def __post_init__(self) -> None:
        for key in V2_KEYS:
            v = getattr(self, key)
            if v is not None and (type(v) is not int or v <= 0):
                raise InvalidValue(f"io limit {key}: must be an integer > 0 or none, got {v!r}")

    def values(self) -> tuple[int | None, int | None, int | None, int | None]:
        return self.rbps, self.wbps, self.riops, self.wiops


NO_LIMIT = IoLimit()


def parse_io_max(data: bytes, dev: str, file: str = "io.max") -> IoLimit:
    """`dev`'s caps in a v2 `io.max` ("8:0 rbps=2097152 wbps=max riops=max wiops=120", one line a device
    with a cap; a device not listed has none)."""
    for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] != dev:
            continue
        got: dict[str, int | None] = {}
        for item in parts[1:]:
            key, _, value = item.partition("=")
            if key not in V2_KEYS or not value:
                raise UnknownFormat(file, n, line, "expected MAJ:MIN rbps= wbps= riops= wiops=")
            try:
                got[key] = None if value == "max" else int(value)
            except ValueError:
                raise UnknownFormat(file, n, line, f"{key}: expected an integer or max") from None
        return IoLimit(**got)
    return NO_LIMIT


def format_io_max(dev: str, limit: IoLimit) -> str:
    """The line written to `io.max` (every key: "max" lifts a cap)."""
    return f"{dev} " + " ".join(f"{k}={'max' if v is None else v}" for k, v in zip(V2_KEYS, limit.values(),
                                                                                    strict=True))


def parse_throttle(data: bytes, dev: str, file: str) -> int | None:
    """`dev`'s value in a v1 `blkio.throttle.*_device` file ("8:0 10485760", one line a device with a cap)."""
    for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        parts = line.split()
        if len(parts) == 2 and parts[0] == dev:
            try:
                return int(parts[1]) or None
            except ValueError:
                raise UnknownFormat(file, n, line, "expected 'MAJ:MIN <integer>'") from None
    return None


@dataclass(frozen=True, slots=True)
class IoStat:
    """What a cgroup did on one device since it was made: bytes and IOs read and written."""

    rbytes: int = 0
    wbytes: int = 0
    rios: int = 0
    wios: int = 0


def parse_io_stat(data: bytes, file: str = "io.stat") -> dict[str, IoStat]:
    """v2 `io.stat`: "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0" (and keys a newer kernel adds)."""
    out: dict[str, IoStat] = {}
    for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if not _DEVICE.fullmatch(parts[0]):
            raise UnknownFormat(file, n, line, "expected MAJ:MIN key=value ...")
        got = {}
        for item in parts[1:]:
            key, _, value = item.partition("=")
            if key in ("rbytes", "wbytes", "rios", "wios"):
                try:
                    got[key] = int(value)
                except ValueError:
                    raise UnknownFormat(file, n, line, f"{key}: expected an integer") from None
        out[parts[0]] = IoStat(**got)
    return out


def parse_blkio(service_bytes: bytes, serviced: bytes) -> dict[str, IoStat]:
    """v1 `blkio.throttle.io_service_bytes_recursive` and `io_serviced_recursive` ("8:0 Read 4096" lines,
    a `Total` line last)."""
    table: dict[str, dict[str, int]] = {}
    for data, what, file in ((service_bytes, "bytes", "blkio.throttle.io_service_bytes_recursive"),
                              (serviced, "ios", "blkio.throttle.io_serviced_recursive")):
        for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            parts = line.split()
            if len(parts) != 3 or parts[1] not in ("Read", "Write"):
                continue  # Sync, Async, Discard, Total, and the Total line of all devices
            if not _DEVICE.fullmatch(parts[0]):
                raise UnknownFormat(file, n, line, "expected 'MAJ:MIN Read|Write <integer>'")
            try:
                value = int(parts[2])
            except ValueError:
                raise UnknownFormat(file, n, line, "expected an integer") from None
            key = ("r" if parts[1] == "Read" else "w") + what
            table.setdefault(parts[0], {})[key] = value
    return {dev: IoStat(**v) for dev, v in table.items()}


def disk_of(st_dev: int, sys_dev_block: Path = SYS_DEV_BLOCK) -> str | None:
    """The whole disk behind a filesystem's device number (a partition's disk), as MAJ:MIN; None for what has
    no disk under it (tmpfs, overlay, a virtual device: loop, zram, device-mapper, md)."""
    node = sys_dev_block / f"{os.major(st_dev)}:{os.minor(st_dev)}"
    try:
        real = node.resolve(strict=True)
    except OSError:
        return None
    if "/devices/virtual/" in str(real):
        return None
    if (real / "partition").exists():
        real = real.parent
    try:
        return check_device((real / "dev").read_text().strip())
    except (OSError, InvalidValue):
        return None


def disks_of(paths: list[str], sys_dev_block: Path = SYS_DEV_BLOCK) -> tuple[str, ...]:
    """The disks backing these directories (those that exist and have one), each once, sorted."""
    found = set()
    for p in paths:
        try:
            dev = disk_of(os.stat(p).st_dev, sys_dev_block)
        except OSError:
            continue
        if dev is not None:
            found.add(dev)
    return tuple(sorted(found))
