"""A contained disk for tests and benches: a loop device over a file on a real disk, with direct IO (so its
IO reaches the disk below without the page cache), ext4 on it, mounted in a directory of the caller's own.

A loop device has a request queue and a scheduler of its own (`/sys/block/loopN/queue/scheduler`): a test or
bench may switch that scheduler, set BFQ weights for it and throttle IO to it, and nothing of the machine's
real disk changes. Everything it makes (the mount, the loop device, the file) is removed on the way out,
also on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MI = 1 << 20


class LoopUnavailable(Exception):
    """No loop device can be made here; the message says why."""


@dataclass(frozen=True, slots=True)
class LoopDisk:
    """A contained disk: `mount` (ext4, on it), `dev` (`MAJ:MIN`), `name` (`loopN`)."""

    mount: Path
    dev: str
    name: str

    @property
    def queue(self) -> Path:
        return Path(f"/sys/block/{self.name}/queue")

    def scheduler(self) -> str:
        """The loop device's scheduler now (the bracketed one)."""
        text = (self.queue / "scheduler").read_text()
        return text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()

    def set_scheduler(self, name: str) -> None:
        (self.queue / "scheduler").write_text(name)
        if self.scheduler() != name:
            raise LoopUnavailable(f"{self.name}: scheduler {name!r} not taken (offered: "
                                  f"{(self.queue / 'scheduler').read_text().strip()})")


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LoopUnavailable(f"{argv[0]}: {err}") from None
    if done.returncode != 0:
        raise LoopUnavailable(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


@contextlib.contextmanager
def loop_disk(parent: Path, mib: int, scheduler: str | None = None) -> Iterator[LoopDisk]:
    """A `mib` MiB contained disk whose file is in `parent` (which must be on a real disk), its scheduler
    `scheduler` (None: the loop device's own default), removed afterwards. Raises LoopUnavailable (nothing
    left behind) where it cannot be made."""
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            raise LoopUnavailable(f"{tool} is not installed (util-linux, e2fsprogs, mount)")
    image = parent / "loopdisk.img"
    mount = parent / "loopdisk"
    loop = ""
    mounted = False
    try:
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, mib * MI)  # allocated up front: no block allocation in a measurement
        finally:
            os.close(fd)
        loop = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)])
        name = os.path.basename(loop)
        if (Path(f"/sys/block/{name}/loop/dio").read_text().strip()) != "1":
            raise LoopUnavailable(f"{loop}: direct IO not taken")
        # the inode tables and journal written now, not by ext4lazyinit during a measurement
        _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", loop])
        mount.mkdir()
        _run(["mount", "-t", "ext4", loop, str(mount)])
        mounted = True
        disk = LoopDisk(mount, Path(f"/sys/block/{name}/dev").read_text().strip(), name)
        if scheduler is not None:
            disk.set_scheduler(scheduler)
        yield disk
    finally:
        if mounted:
            try:
                _run(["umount", str(mount)])
            except LoopUnavailable:  # busy (a process of the caller's still in it): detached lazily
                with contextlib.suppress(LoopUnavailable):
                    _run(["umount", "--lazy", str(mount)])
        if loop:
            with contextlib.suppress(LoopUnavailable):
                _run(["losetup", "--detach", loop])
        with contextlib.suppress(OSError):
            mount.rmdir()
        image.unlink(missing_ok=True)
