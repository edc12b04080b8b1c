"""Domain errors of the cgroup layer, and the one place that maps an OSError onto them."""

from __future__ import annotations

import errno
import os


class CgroupError(Exception):
    """Any failure reading or writing a cgroup; `path` is the file or directory involved."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


class CgroupGone(CgroupError):
    """The cgroup no longer exists (ENOENT/ENODEV): the workload ended, it is not a fault."""


class InvalidValue(CgroupError, ValueError):
    """The kernel (EINVAL) or our own validation refused a value."""


class CgroupBusy(CgroupError):
    """EBUSY: a cgroup still holds tasks or children, or a limit is below what is in use."""


class CgroupPermissionError(CgroupError, PermissionError):
    """EACCES/EPERM; the message names the file and the privilege that is missing."""


class UnknownFormat(CgroupError):
    """A file's content is not what the parser expects; names the file and the line."""

    def __init__(self, file: str, line_no: int, line: str | bytes, why: str = "") -> None:
        text = line.decode(errors="replace") if isinstance(line, bytes) else line
        detail = f": {why}" if why else ""
        super().__init__(f"unknown format in {file} line {line_no}: {text!r}{detail}", file)
        self.file = file
        self.line_no = line_no
        self.line = text


class PathOutsideRoot(CgroupError, ValueError):
    """A path would leave the configured cgroup root (absolute, `..`, or a symlink out)."""


def from_oserror(err: OSError, path: str | os.PathLike[str], op: str = "read") -> CgroupError:
    """Map an OSError raised on `path` during `op` ("read", "write", "mkdir", ...) to a CgroupError."""
    where = os.fspath(path)
    code = err.errno
    if code in (errno.ENOENT, errno.ENODEV):
        return CgroupGone(f"cgroup gone: {op} {where}: {err.strerror}", where)
    if code == errno.EROFS:
        return CgroupPermissionError(f"read-only: {op} {where}: the cgroup mount is read-only here (mount it "
                                     f"read-write)", where)
    if code in (errno.EACCES, errno.EPERM):
        return CgroupPermissionError(
            f"permission denied: {op} {where}: needs root or CAP_SYS_ADMIN / write access to {where}",
            where,
        )
    if code == errno.EINVAL:
        return InvalidValue(f"invalid value: {op} {where}: the kernel refused it (EINVAL)", where)
    if code == errno.EBUSY:
        return CgroupBusy(f"busy: {op} {where}: the cgroup still has tasks, children or usage", where)
    return CgroupError(f"{op} {where}: {err.strerror or err}", where)
