"""Notice cgroups as they are made: inotify on cgroup directories (the kernel reports a mkdir in cgroupfs as
IN_CREATE of a directory), as koordlet's PLEG does to act on a new pod at once instead of at its next resync.

`DirWatcher` is non-blocking: put `fileno()` in an event loop's readers and call `read()` when it is ready.
Paths are absolute directories; the caller confines them (the agent watches its BE tier and the pods in it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from dataclasses import dataclass

from cgroups.errors import CgroupError

IN_CREATE = 0x0000_0100
IN_DELETE = 0x0000_0200
IN_Q_OVERFLOW = 0x0000_4000
IN_IGNORED = 0x0000_8000
IN_ONLYDIR = 0x0100_0000
IN_ISDIR = 0x4000_0000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of NUL-padded name)
_MAX_WATCHES = 65_536


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True, slots=True)
class DirEvent:
    """A directory made (`created`) or removed in the watched directory `parent`; `overflow`: the kernel's
    queue overflowed and events were lost (rescan)."""

    parent: str
    name: str
    created: bool
    overflow: bool = False


class DirWatcher:
    """Watches directories for child directories being made and removed."""

    def __init__(self) -> None:
        self._c = _libc()
        fd = self._c.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise CgroupError(f"inotify_init1: {os.strerror(err)}")
        self._fd: int = fd
        self._paths: dict[int, str] = {}
        self._wds: dict[str, int] = {}

    def fileno(self) -> int:
        return self._fd

    def watch(self, path: str) -> bool:
        """Watch `path`; False when it does not exist (any more). Raises CgroupError on other failures."""
        if path in self._wds:
            return True
        if len(self._wds) >= _MAX_WATCHES:
            raise CgroupError(f"inotify: more than {_MAX_WATCHES} directories watched; not watching {path}")
        wd = self._c.inotify_add_watch(self._fd, os.fsencode(path), IN_CREATE | IN_DELETE | IN_ONLYDIR)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                return False
            raise CgroupError(f"inotify_add_watch {path}: {os.strerror(err)}", path)
        self._paths[wd] = path
        self._wds[path] = wd
        return True

    def unwatch(self, path: str) -> None:
        wd = self._wds.pop(path, None)
        if wd is not None:
            self._paths.pop(wd, None)
            self._c.inotify_rm_watch(self._fd, wd)  # fails harmlessly when the kernel dropped it already

    def read(self) -> list[DirEvent]:
        """Events queued now (an empty list when none)."""
        try:
            buf = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return []
        out: list[DirEvent] = []
        off = 0
        while off + _EVENT.size <= len(buf):
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
            name = buf[off + _EVENT.size: off + _EVENT.size + length].rstrip(b"\0").decode(errors="replace")
            off += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                out.append(DirEvent("", "", False, overflow=True))
                continue
            parent = self._paths.get(wd)
            if parent is None:
                continue
            if mask & IN_IGNORED:  # the watched directory itself went away
                self._paths.pop(wd, None)
                self._wds.pop(parent, None)
                continue
            if mask & IN_ISDIR and mask & (IN_CREATE | IN_DELETE):
                out.append(DirEvent(parent, name, bool(mask & IN_CREATE)))
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._paths.clear()
            self._wds.clear()
