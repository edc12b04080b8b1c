"""Whether the agent made its cgroup root: a small marker file beside the state file.

A root the agent made is removed on a clean exit (`cgroups.cleanup_on_exit`). Remembering that only in
memory loses it at a crash: the next agent finds the root, adopts it, and leaves it for good. The marker is
written before the root is made and removed once the root is gone, so a restarted agent still knows the
root is its own; a root it found already there (the kubelet's `kubepods`) never gets a marker.

A name is not an identity: cgroups do not survive a reboot but the state directory does, and someone else
may make a directory of the same name. So once the agent has made the root, the marker also records the
boot id and the root directory's inode; it claims a root only when both still match. A marker written
just before a crash, with no inode yet, claims nothing: the root is then left, never wrongly removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from agent.state.persist import StateStore

log = logging.getLogger("coloc.state")

FORMAT = "coloc-agent/owned-root/v2"


class RootMarker:
    """`<state file>.root`: the hierarchy mount and root this agent made (and has not removed yet)."""

    def __init__(self, state_path: str | Path, mount: str, root: str, boot_id: str) -> None:
        state = Path(state_path)
        self.path = state.with_name(f"{state.name}.root")
        self._body: dict[str, object] = {"format": FORMAT, "mount": mount, "root": root.strip("/"),
                                         "boot_id": boot_id}

    def claims(self, inode: int | None) -> bool:
        """Whether the marker names this very root, made in this boot, as the directory `inode` (a marker for
        another root, mount or boot, or one written before the root was made, does not count)."""
        if inode is None or not self._body["boot_id"]:
            return False
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read(4096))
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as err:
            log.error("root marker %s is unusable (%s); the root is not taken as the agent's", self.path, err)
            return False
        return bool(data == {**self._body, "inode": inode})

    def record(self, inode: int | None = None) -> None:
        """Durably note that the agent is about to make the root (no inode yet) or has made it as the
        directory `inode`; raises StateFileError if it cannot."""
        body = self._body if inode is None else {**self._body, "inode": inode}
        StateStore(self.path).write_bytes(json.dumps(body, sort_keys=True).encode() + b"\n")

    def clear(self) -> None:
        """The root is gone: forget it (a failure is logged; a stale marker only names a missing root)."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as err:
            log.warning("root marker %s not removed: %s", self.path, err.strerror)
            return
        with contextlib.suppress(OSError):
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
