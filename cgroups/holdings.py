"""One journal of what the agent holds on the node, so that a killed agent's next run gives it back.

Every knob the agent sets goes through the writer (`cgroups/writer.py`); a knob set on behalf of a feature
(a `Holder`: suppression, memory QoS, batch limits, ...) is a *holding*: keyed by (knob, cgroup), with the
value to give back (what the file held before the feature first changed it) and the values that may be the
feature's own in the file (the one in place and, recorded before it is written, the next one). The journal
is written *before* a knob changes owner or takes a value it does not name yet, never at a steady tick.

The one rule, at the next start (the same boot) and for every holder: a holding its holder does not claim
again in its first pass (off, or its plan wants it no more) is given back where the file still reads as one
of its values, and left (counted, with the writer when known) where another writer changed it since. After
a reboot (another boot id) nothing is given back: the kernel's cgroups went with it.

The one exception, `Holder.moving`: a holder whose values move every tick (BE CPU suppression: the tier's
quota and cpuset follow HP's usage) would write the journal every tick; its holding names no values, and any
value found is taken as its own. That is safe because nothing but this agent writes those knobs on the BE
tier (docs/coexistence.md: the kubelet writes the tier's weight, which `cpu.idle` keeps, never its quota or
cpuset).

Holdings that are not cgroup files (an egress tree on a device, the cgroup root the agent made) are *marks*:
a kind and the data their remover needs, kept in the same file.

The file is replaced by write-then-rename on the event loop (microseconds: a killed process loses nothing
the kernel's page cache holds), and fsync'd off it by a thread of its own: a power cut, which could lose an
un-synced journal, also resets every cgroup it names (the next boot has another boot id).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgroups.errors import PathOutsideRoot
from cgroups.paths import check_rel

log = logging.getLogger("coloc.cgroups")

FORMAT = "coloc-agent/holdings/v1"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_BYTES = 16 << 20  # ~150 bytes a holding: far beyond any node's pods and containers


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id ("" where the kernel does not say)."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class Holder:
    """A feature that holds knobs: its name (the journal's and the metrics' label), whether its values move
    every tick (the one exception to "give back only a value that still reads as ours": see above), and
    whether its knobs of one cgroup go together (`together`: memory QoS's min, low and high, which the
    kubelet's MemoryQoS gate also writes as one: where another writer changed one, all are left to it)."""

    name: str
    moving: bool = False
    together: bool = False


@dataclass(frozen=True, slots=True)
class Holding:
    """One knob of one cgroup a holder has changed: the value to give back, the values that may be its own
    (None: any, for a moving holder). Values are in the knob's JSON form (`Knob.dump`)."""

    knob: str
    cgroup: str
    holder: str
    give_back: Any
    ours: tuple[Any, ...] | None

    @property
    def key(self) -> tuple[str, str]:
        return self.knob, self.cgroup

    def encode(self) -> dict[str, Any]:
        return {"knob": self.knob, "cgroup": self.cgroup, "holder": self.holder, "give_back": self.give_back,
                "ours": None if self.ours is None else list(self.ours)}


def _holding(d: Any, i: int) -> Holding:
    where = f"held[{i}]"
    if not isinstance(d, dict) or set(d) != {"knob", "cgroup", "holder", "give_back", "ours"}:
        raise ValueError(f"{where}: must be an object with knob, cgroup, holder, give_back, ours")
    if not isinstance(d["knob"], str) or not isinstance(d["holder"], str):
        raise ValueError(f"{where}: knob and holder must be strings")
    if d["ours"] is not None and not isinstance(d["ours"], list):
        raise ValueError(f"{where}.ours: must be null or a list")
    try:
        rel = check_rel(d["cgroup"], f"{where}.cgroup")
    except PathOutsideRoot as err:
        raise ValueError(str(err)) from None
    ours = None if d["ours"] is None else tuple(d["ours"])
    return Holding(d["knob"], rel, d["holder"], d["give_back"], ours)


@dataclass
class JournalStats:
    writes: int = 0  # times the file was replaced
    given_back: Counter[str] = field(default_factory=Counter)  # holder -> holdings given back
    left: Counter[tuple[str, str]] = field(default_factory=Counter)  # (knob, writer) -> left to that writer
    errors: int = 0  # the file could not be written (said each time)


class Journal:
    """`<state file>.held`; `path` None keeps the holdings in memory only (no state file configured)."""

    def __init__(self, path: str | Path | None, boot_id: str) -> None:
        self.path = Path(path) if path is not None else None
        self.boot_id = boot_id
        self.held: dict[tuple[str, str], Holding] = {}
        self.marks: dict[str, Any] = {}
        self.inherited: set[tuple[str, str]] = set()  # an earlier run's, not claimed again by this one
        self.marks_left: dict[str, Any] = {}  # an earlier run's marks, until removed or taken over
        self.stats = JournalStats()
        self._sync = threading.Condition()
        self._dirty = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._seq = 0

    @classmethod
    def beside(cls, state_path: str, boot_id: str | None = None) -> Journal:
        """The journal of a state file ("" : in memory only), with what an earlier run of this boot left."""
        journal = cls(f"{state_path}.held" if state_path else None,
                      read_boot_id() if boot_id is None else boot_id)
        journal.load()
        return journal

    # -- reading -----------------------------------------------------------------------------------------

    def decode(self, data: bytes) -> tuple[dict[tuple[str, str], Holding], dict[str, Any]]:
        """A journal file's holdings and marks; none for another boot's; ValueError naming what is wrong."""
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ValueError(f"format: not {FORMAT!r}")
        if not isinstance(body.get("boot_id"), str) or not isinstance(body.get("held"), list) \
                or not isinstance(body.get("marks"), dict):
            raise ValueError("boot_id must be a string, held a list and marks an object")
        if not self.boot_id or body["boot_id"] != self.boot_id:
            return {}, {}
        held = {h.key: h for h in (_holding(d, i) for i, d in enumerate(body["held"]))}
        return held, dict(body["marks"])

    def load(self) -> None:
        """Take what the run before held in this boot as inherited; nothing when the file is untrusted."""
        if self.path is None:
            return
        for tmp in self.path.parent.glob(f".{self.path.name}.tmp-*"):  # a killed run's, never renamed
            with contextlib.suppress(OSError):
                tmp.unlink()
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            held, marks = self.decode(data)
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError, TypeError, AttributeError) as err:  # a crafted file too
            log.error("the journal of holdings %s is unusable (%s): what an earlier run held is not given "
                      "back",
                      self.path, err)
            return
        self.held.update(held)
        self.inherited = set(held)
        self.marks_left = marks
        self.marks.update(marks)

    # -- changing ----------------------------------------------------------------------------------------

    def hold(self, holding: Holding) -> None:
        """Record `holding` (replacing the one of its key): the file is written before the knob is."""
        self.inherited.discard(holding.key)
        if self.held.get(holding.key) != holding:
            self.held[holding.key] = holding
            self.save()

    def claim(self, key: tuple[str, str], holder: str) -> None:
        """`holder` wants the knob as it is (a read-compare-write found its value): an inherited holding of
        the same holder is this run's again, and keeps the value to give back."""
        if key in self.inherited and self.held[key].holder == holder:
            self.inherited.discard(key)

    def drop(self, keys: list[tuple[str, str]]) -> None:
        """Forget holdings (given back, left to another writer, or their cgroup gone)."""
        gone = [k for k in keys if k in self.held]
        for k in gone:
            del self.held[k]
            self.inherited.discard(k)
        if gone:
            self.save()

    def drop_below(self, rel: str) -> None:
        """Forget the holdings of `rel` and below (a cgroup removed)."""
        prefix = rel + "/"
        self.drop([k for k in self.held if not rel or k[1] == rel or k[1].startswith(prefix)])

    def mark(self, kind: str, data: Any) -> None:
        """Record a holding that is not a cgroup file (its remover reads `data`), before it is made."""
        self.marks_left.pop(kind, None)
        if self.marks.get(kind) != data:
            self.marks[kind] = data
            self.save()

    def unmark(self, kind: str) -> None:
        """The mark's holding is gone (removed by a clean exit, or by a later run's remover)."""
        self.marks_left.pop(kind, None)
        if kind in self.marks:
            del self.marks[kind]
            self.save()

    def due(self, holder: str) -> list[Holding]:
        """The inherited holdings of `holder` not claimed again: what its settling gives back."""
        return [self.held[k] for k in sorted(self.inherited) if self.held[k].holder == holder]

    def holders(self) -> Counter[str]:
        """How many holdings each holder has now."""
        return Counter(h.holder for h in self.held.values())

    # -- the file ----------------------------------------------------------------------------------------

    def encode(self) -> bytes:
        body = {"format": FORMAT, "boot_id": self.boot_id,
                "held": [self.held[k].encode() for k in sorted(self.held)], "marks": self.marks}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"

    def save(self) -> None:
        """Replace the file (write, then rename: atomic for a killed process); its fsync is left to the
        syncing thread. A failure is said and counted; the caller's write goes on (a leftover, at worst)."""
        if self.path is None:
            return
        self._seq += 1
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{self._seq}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(self.encode())
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self.stats.errors += 1
            log.warning("the journal of holdings %s not written: %s", self.path, err.strerror)
            return
        self.stats.writes += 1
        self._wake_syncer()

    def _wake_syncer(self) -> None:
        with self._sync:
            self._dirty = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._syncer, name="coloc-journal-sync", daemon=True)
                self._thread.start()
            self._sync.notify()

    def _syncer(self) -> None:
        while True:
            with self._sync:
                while not self._dirty and not self._closing:
                    self._sync.wait()
                if not self._dirty:
                    return
                self._dirty = False
            self.fsync()

    def fsync(self) -> None:
        """The file and its directory to stable storage."""
        if self.path is None:
            return
        for target, flags in ((self.path, os.O_RDONLY), (self.path.parent, os.O_RDONLY | os.O_DIRECTORY)):
            with contextlib.suppress(OSError):
                fd = os.open(target, flags | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        """Wait for the last fsync (at exit)."""
        with self._sync:
            self._closing = True
            self._sync.notify()
            thread = self._thread
        if thread is not None:
            thread.join(5.0)

