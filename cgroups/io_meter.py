"""What cgroups did on the disks, as counters: a cgroup's IO per disk (v2 `io.stat`, v1
`blkio.throttle.io_service_bytes_recursive` + `io_serviced_recursive`) and its IO pressure (`io.pressure`
`some total`, on the cgroup2 mount: v2, or a hybrid host's unified tree where the cgroup exists there).

Counters only: the rates over a window are the caller's (`agent/daemon/io_guard.py`). A cgroup that is gone
reads as None, never an error; a file in a format we do not know raises `UnknownFormat`.
"""

from __future__ import annotations

from pathlib import Path

from cgroups.discovery import Hierarchy
from cgroups.errors import CgroupError
from cgroups.io import IoStat, parse_blkio, parse_io_stat
from cgroups.parsers import psi_some_total
from cgroups.paths import check_rel, join


class IoMeter:
    """Reads cgroups named relative to `root` (as `CgroupReader` does)."""

    def __init__(self, hierarchy: Hierarchy, root: str) -> None:
        self.hierarchy = hierarchy
        root = check_rel(root, "cgroup root")
        self.v1 = hierarchy.is_v1("blkio")
        if self.v1:
            self._io = join(str(hierarchy.v1["blkio"]), root)
        elif hierarchy.mode == "v2" and "io" in hierarchy.unified_controllers:
            self._io = join(str(hierarchy.unified), root)
        else:
            raise CgroupError("no IO controller: neither a v1 blkio mount nor io on the cgroup2 mount")
        self._psi = join(str(hierarchy.unified), root) if hierarchy.unified is not None else ""

    def dir(self, rel: str) -> str:
        return join(self._io, rel)

    def stat(self, rel: str) -> dict[str, IoStat] | None:
        """What `rel` (and everything below it) did on each disk since it was made; None if it is gone."""
        d = join(self._io, rel)
        try:
            if self.v1:
                return parse_blkio(_read(f"{d}/blkio.throttle.io_service_bytes_recursive"),
                                   _read(f"{d}/blkio.throttle.io_serviced_recursive"))
            return parse_io_stat(_read(f"{d}/io.stat"))
        except FileNotFoundError:
            return None

    def stall_us(self, rel: str) -> int | None:
        """Microseconds some task of `rel` waited for IO since it was made (None: no pressure file for it)."""
        if not self._psi:
            return None
        f = f"{join(self._psi, rel)}/io.pressure"
        try:
            return psi_some_total(_read(f), "io.pressure")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, rel: str) -> bool:
        return Path(join(self._io, rel)).is_dir()


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read()
