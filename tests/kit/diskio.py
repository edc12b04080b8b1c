"""Real disk work for tests and benches: a directory on a real disk, an HP process that commits (4 KiB write +
fsync every few ms), a BE flood, and BE's caps as the kernel holds them (v1 `blkio.throttle.*`, v2
`io.max`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cgroups.io import disk_of
from kit.realcg import RealRoot

COMMIT = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
os.unlink(sys.argv[1])  # the space goes with the process, however it ends
buf = b"x" * 4096
while True:
    os.pwrite(fd, buf, 0)
    os.fsync(fd)
    time.sleep(float(sys.argv[2]))
"""


def commit_argv(path: Path, every_s: float = 0.005) -> list[str]:
    """An HP process writing 4 KiB and fsyncing it every `every_s` to an unlinked file at `path`."""
    return [sys.executable, "-c", COMMIT, str(path), str(every_s)]


def flood_argv(path: Path, mib: int = 64) -> list[str]:
    """A BE flood: direct 1 MiB writes (charged to its cgroup on v1 and v2) over and over the same `mib` MiB
    of `path`, so the disk sees a flood and never fills (a small guest disk would within seconds)."""
    dd = f"dd if=/dev/zero of={path} bs=1M count={mib} oflag=direct conv=notrunc status=none"
    return ["sh", "-c", f"while {dd}; do :; done"]


def written(root: RealRoot, rel: str, dev: str) -> int:
    """Bytes `rel` (and below) wrote to `dev` since it was made, as the kernel charged them."""
    from cgroups.io import parse_blkio, parse_io_stat

    if root.hierarchy.is_v1("blkio"):
        d = root.path("blkio", rel)
        stats = parse_blkio((d / "blkio.throttle.io_service_bytes_recursive").read_bytes(),
                            (d / "blkio.throttle.io_serviced_recursive").read_bytes())
    else:
        stats = parse_io_stat((root.path("unified", rel) / "io.stat").read_bytes())
    return stats[dev].wbytes if dev in stats else 0


@contextlib.contextmanager
def on_disk(prefix: str = "coloc-test-io-") -> Iterator[tuple[Path, str]]:
    """A directory of the caller's own on a real disk (below /var/tmp: the guest's /tmp is a tmpfs) and that
    disk's `MAJ:MIN`; removed afterwards. Raises LookupError where /var/tmp is on no disk."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    try:
        dev = disk_of(os.stat(d).st_dev)
        if dev is None:
            raise LookupError("/var/tmp is on no disk")
        yield d, dev
    finally:
        shutil.rmtree(d, ignore_errors=True)


def be_cap(root: RealRoot, rel: str, dev: str) -> tuple[int | None, int | None, int | None, int | None]:
    """BE's caps on `dev` as the kernel holds them for `rel` (below the test's root): rbps, wbps, riops,
    wiops, None where there is none."""
    from cgroups.io import V1_FILES, parse_io_max, parse_throttle

    if root.hierarchy.is_v1("blkio"):
        d = root.path("blkio", rel)
        r, w, ri, wi = (parse_throttle((d / f).read_bytes(), dev, f) for f in V1_FILES)
        return r, w, ri, wi
    return parse_io_max((root.path("unified", rel) / "io.max").read_bytes(), dev).values()


def can_cap(root: RealRoot) -> bool:
    """Whether this host has a controller that caps IO: v1 blkio, or io on a pure v2 mount."""
    return root.hierarchy.is_v1("blkio") or (root.hierarchy.mode == "v2"
                                              and "io" in root.hierarchy.unified_controllers)
