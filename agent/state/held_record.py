"""Values the agent has put in place, kept on disk beside the state file for the next run of the same boot.

An executor gives back what it holds when no plan wants it any more; what it holds lived only in memory, so
a feature turned off while the agent was down (killed, or restarted with a new config) left the values of
the run before in place for good. A sweep of every file the feature may write would fight other writers
(the kubelet writes the same files); a record lets the next run give back only what it can tell is still its
own: what the files still read as recorded. A value changed since is another writer's and is left.

Cgroups do not outlive a boot, so a record names the boot it was made in; another boot's is ignored. A file
that is damaged or not ours gives nothing back (said once, naming what is wrong): the cost is a leftover,
never a write. Each record is `<state file>.<suffix>`, replaced atomically (fsync'd) by one writer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from agent.state.errors import StateFileError
from agent.state.persist import StateStore
from cgroups.errors import PathOutsideRoot
from cgroups.paths import check_rel

log = logging.getLogger("coloc.state")

T = TypeVar("T")
MAX_BYTES = 16 << 20  # ~100 bytes a cgroup: far beyond any node's pods and containers


def checked_rel(value: Any, where: str) -> str:
    """A recorded cgroup path, refused (ValueError naming `where`) when it is not inside the root."""
    try:
        return check_rel(value, where)
    except PathOutsideRoot as err:
        raise ValueError(str(err)) from None


def optional_bytes(value: Any, where: str) -> int | None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"{where}: must be null or an integer >= 0, got {value!r}")
    return value


class Codec(Protocol[T]):
    """What one record holds: its format name, the key of its payload, and the payload's (de)coding."""

    format: str
    key: str
    what: str  # for the log lines: "memory QoS", "BE tier memory cap"

    def empty(self) -> T: ...

    def encode(self, value: T) -> Any: ...

    def decode(self, payload: Any) -> T:
        """The payload's value; ValueError naming the field that is wrong."""
        ...


class HeldRecord(Generic[T]):
    """`<state file>.<suffix>`: read once at start, replaced whenever what the executor holds changes."""

    def __init__(self, state_path: str | Path, suffix: str, boot_id: str, codec: Codec[T]) -> None:
        state = Path(state_path)
        self.path = state.with_name(f"{state.name}.{suffix}")
        self._boot_id = boot_id
        self._codec = codec
        self._store = StateStore(self.path)

    def decode(self, data: bytes) -> T:
        """The recorded value; empty for another boot's record; ValueError naming what is wrong."""
        c = self._codec
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != c.format:
            raise ValueError(f"format: not {c.format!r}")
        if not isinstance(body.get("boot_id"), str) or c.key not in body:
            raise ValueError(f"boot_id must be a string, and {c.key} present")
        if not self._boot_id or body["boot_id"] != self._boot_id:
            return c.empty()
        return c.decode(body[c.key])

    def load(self) -> T:
        """What the run before held in this boot; empty when there is no record or it cannot be trusted."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            return self.decode(data)
        except FileNotFoundError:
            return self._codec.empty()
        except (OSError, ValueError, RecursionError, TypeError, AttributeError) as err:  # a crafted file too
            log.error("%s record %s is unusable (%s): values an earlier run left are not given back",
                      self._codec.what, self.path, err)
            return self._codec.empty()

    def save(self, value: T) -> bool:
        """Durably replace the record (an empty value records that nothing is held); False (said) when it
        could not be written."""
        c = self._codec
        body = {"format": c.format, "boot_id": self._boot_id, c.key: c.encode(value)}
        try:
            self._store.write_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n")
        except StateFileError as err:
            log.warning("%s record not written: %s", c.what, err)
            return False
        return True
