"""What cgroups did on the disks, as counters: a cgroup's IO per disk (v2 `io.stat`, v1
`blkio.throttle.io_service_bytes_recursive` + `io_serviced_recursive`) and its IO pressure (`io.pressure`
`some total`, on the cgroup2 mount: v2, or a hybrid host's unified tree where the cgroup exists there).

Counters only: the rates over a window are the caller's (`agent/executors/io_guard.py`). A cgroup that is
gone reads as None, never an error; a file in a format we do not know raises `UnknownFormat`. Each file is
opened once and read with `pread` after (the guard reads every workload's at each tick); `forget` closes a
gone cgroup's.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
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
        self._fds: dict[str, int] = {}

    def dir(self, rel: str) -> str:
        return join(self._io, rel)

    def stat(self, rel: str) -> dict[str, IoStat] | None:
        """What `rel` (and everything below it) did on each disk since it was made; None if it is gone."""
        d = join(self._io, rel)
        try:
            if self.v1:
                return parse_blkio(self._read(f"{d}/blkio.throttle.io_service_bytes_recursive"),
                                   self._read(f"{d}/blkio.throttle.io_serviced_recursive"))
            return parse_io_stat(self._read(f"{d}/io.stat"))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stall_us(self, rel: str) -> int | None:
        """Microseconds some task of `rel` waited for IO since it was made (None: no pressure file for it)."""
        if not self._psi:
            return None
        f = f"{join(self._psi, rel)}/io.pressure"
        try:
            return psi_some_total(self._read(f), "io.pressure")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, rel: str) -> bool:
        return Path(join(self._io, rel)).is_dir()

    def count_on(self, dev: str) -> bool:
        """v1: have the kernel count `dev`'s IO per cgroup; whether this wrote. A v1 kernel's blkio throttle
        counts a disk's IO (`io_service_bytes`, `io_serviced`) only once throttling is active on its queue
        (6.x: from the first write of a throttle rule on that disk, by anyone, until the disk goes):
        measured on a fresh loop device, 0 bytes counted for a 20 MiB direct write before, all of them after.
        Writing `MAJ:MIN 0` (no rule) to the agent root's `read_bps_device` activates it and caps nothing;
        it is written only where that file holds no rule for the disk (it would lift one)."""
        if not self.v1:
            return False
        path = f"{self._io}/blkio.throttle.read_bps_device"
        with open(path, "rb") as f:
            if any(line.split()[:1] == [dev.encode()] for line in f.read().splitlines()):
                return False
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, f"{dev} 0".encode())
        finally:
            os.close(fd)
        return True

    def _read(self, path: str) -> bytes:
        """The file's text; FileNotFoundError once its cgroup is gone (the kernel's ENODEV on an open fd)."""
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, 65536, 0)
        except OSError as err:
            self._close(path)
            if err.errno == errno.ENODEV:
                raise FileNotFoundError(errno.ENOENT, "cgroup removed", path) from None
            raise

    def _close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def forget(self, rels: Iterable[str]) -> None:
        """Close the files of these cgroups (gone, or no longer read)."""
        dirs = {join(self._io, r) + "/" for r in rels} | ({join(self._psi, r) + "/" for r in rels}
                                                          if self._psi else set())
        for path in [p for p in self._fds if p.rsplit("/", 1)[0] + "/" in dirs]:
            self._close(path)

    def close(self) -> None:
        for path in list(self._fds):
            self._close(path)
