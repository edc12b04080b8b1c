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
cpuset). A moving holder holds a knob from its first write until it releases it (a clean exit); a cgroup
below one it holds (a v1 pod made under a narrowed cpuset starts narrowed) takes that one's value to give
back, and a v1 cpuset is given back with its subtree.

Holdings that are not cgroup files (an egress tree on a device, the cgroup root the agent made) are *marks*:
a kind and the data their remover needs, kept in the same file.

The file is a log of JSON lines: a header (format, boot id, the cgroup root it names paths under), then one
line per change (`hold`, `drop`, `mark`, `unmark`), appended with one write(2) on the event loop
(microseconds, whatever the number of holdings; a killed process loses nothing the kernel's page cache
holds), and rewritten whole (write, then rename) once the log is much longer than what it holds. It is
fsync'd off the loop by a thread of its own: a power cut, which could lose an un-synced tail, also resets
every cgroup it names (the next boot has another boot id). A journal of another boot or another cgroup root
gives nothing back.
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
from cgroups.knobs import knob_named
from cgroups.paths import check_rel

log = logging.getLogger("coloc.cgroups")

FORMAT = "coloc-agent/holdings/v2"
COMPACT_AT = 1024  # log lines before the first rewrite; then whenever they are 4x what is held
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


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _replay(entry: Any, n: int, held: dict[tuple[str, str], Holding], marks: dict[str, Any]) -> None:
    """Apply one log line; ValueError naming the line when it is not one of the journal's."""
    if not isinstance(entry, dict) or len(entry) != 1:
        raise ValueError(f"line {n}: must be an object with one of hold, drop, mark, unmark")
    op, arg = next(iter(entry.items()))
    if op == "hold":
        h = _holding(arg, n)
        held[h.key] = h
    elif op == "drop" and isinstance(arg, list) and all(isinstance(k, list) and len(k) == 2 for k in arg):
        for knob, cgroup in arg:
            held.pop((knob, cgroup), None)
    elif op == "mark" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str):
        marks[arg[0]] = arg[1]
    elif op == "unmark" and isinstance(arg, str):
        marks.pop(arg, None)
    else:
        raise ValueError(f"line {n}: {op!r} is not a change the journal records")


def _holding(d: Any, n: int) -> Holding:
    where = f"line {n} hold"
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
    knob = knob_named(d["knob"])
    if knob is None:
        raise ValueError(f"{where}.knob: no knob {str(d['knob'])[:40]!r}")
    ours = None if d["ours"] is None else tuple(d["ours"])
    for value in (d["give_back"], *(ours or ())):
        knob.load(value)  # ValueError naming the knob when a value is not one of its
    return Holding(d["knob"], rel, d["holder"], d["give_back"], ours)


@dataclass
class JournalStats:
    writes: int = 0  # times the file was replaced
    given_back: Counter[str] = field(default_factory=Counter)  # holder -> holdings given back
    left: Counter[tuple[str, str]] = field(default_factory=Counter)  # (knob, writer) -> left to that writer
    errors: int = 0  # the file could not be written (said each time)


class Journal:
    """`<state file>.held`; `path` None keeps the holdings in memory only (no state file configured)."""

    def __init__(self, path: str | Path | None, boot_id: str, scope: str = "") -> None:
        self.path = Path(path) if path is not None else None
        self.boot_id = boot_id
        self.scope = scope  # the cgroup root (and mount) its paths are under
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
        self._lines = 0  # lines in the file (None of them read yet: rewritten at the first change)
        self._fresh = False  # whether the file holds this run's header

    @classmethod
    def beside(cls, state_path: str, boot_id: str | None = None, scope: str = "") -> Journal:
        """The journal of a state file ("" : in memory only), with what an earlier run of this boot left
        under the cgroup root `scope`."""
        journal = cls(f"{state_path}.held" if state_path else None,
                      read_boot_id() if boot_id is None else boot_id, scope)
        journal.load()
        return journal

    # -- reading -----------------------------------------------------------------------------------------

    def decode(self, data: bytes) -> tuple[dict[tuple[str, str], Holding], dict[str, Any]]:
        """A journal file's holdings and marks; none for another boot's or another root's; ValueError naming
        what is wrong. A last line cut short (a power cut mid-write: it named a knob not written yet) is
        left out."""
        lines = data.split(b"\n")
        if lines and not lines[-1].strip():
            lines.pop()
        head = json.loads(lines[0]) if lines else None
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise ValueError(f"format: not {FORMAT!r}")
        if not isinstance(head.get("boot_id"), str) or not isinstance(head.get("scope"), str):
            raise ValueError("boot_id and scope must be strings")
        if not self.boot_id or head["boot_id"] != self.boot_id or head["scope"] != self.scope:
            return {}, {}
        held: dict[tuple[str, str], Holding] = {}
        marks: dict[str, Any] = {}
        for n, line in enumerate(lines[1:], 2):
            try:
                entry = json.loads(line)
            except ValueError:
                if n == len(lines):
                    break
                raise ValueError(f"line {n}: not JSON") from None
            _replay(entry, n, held, marks)
        return held, marks

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
        self._lines = len(held) + len(marks) + 1

    # -- changing ----------------------------------------------------------------------------------------

    def hold(self, holding: Holding) -> None:
        """Record `holding` (replacing the one of its key): the file is written before the knob is."""
        self.inherited.discard(holding.key)
        if self.held.get(holding.key) != holding:
            self.held[holding.key] = holding
            self._append({"hold": holding.encode()})

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
            self._append({"drop": [list(k) for k in gone]})

    def drop_below(self, rel: str) -> None:
        """Forget the holdings of `rel` and below (a cgroup removed)."""
        prefix = rel + "/"
        self.drop([k for k in self.held if not rel or k[1] == rel or k[1].startswith(prefix)])

    def mark(self, kind: str, data: Any) -> None:
        """Record a holding that is not a cgroup file (its remover reads `data`), before it is made."""
        self.marks_left.pop(kind, None)
        if self.marks.get(kind) != data:
            self.marks[kind] = data
            self._append({"mark": [kind, data]})

    def unmark(self, kind: str) -> None:
        """The mark's holding is gone (removed by a clean exit, or by a later run's remover)."""
        self.marks_left.pop(kind, None)
        if kind in self.marks:
            del self.marks[kind]
            self._append({"unmark": kind})

    def due(self, holder: str) -> list[Holding]:
        """The inherited holdings of `holder` not claimed again: what its settling gives back."""
        return [self.held[k] for k in sorted(self.inherited) if self.held[k].holder == holder]

    def holders(self) -> Counter[str]:
        """How many holdings each holder has now."""
        return Counter(h.holder for h in self.held.values())

    # -- the file ----------------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The whole journal as it would be rewritten: the header, then what is held and marked."""
        head = {"format": FORMAT, "boot_id": self.boot_id, "scope": self.scope}
        lines: list[dict[str, Any]] = [head, *({"hold": self.held[k].encode()} for k in sorted(self.held)),
                                       *({"mark": [kind, data]} for kind, data in sorted(self.marks.items()))]
        return b"".join(_line(x) for x in lines)

    def _append(self, entry: dict[str, Any]) -> None:
        """One change, as one line at the end of the file (one write(2)); the whole file rewritten first when
        it is not this run's yet, and when the log has grown well past what it holds. A failure is said and
        counted; the caller's write goes on (a leftover, at worst)."""
        if self.path is None:
            return
        try:
            if not self._fresh or self._lines > max(COMPACT_AT, 4 * (len(self.held) + len(self.marks))):
                self._rewrite()
            else:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                try:
                    os.write(fd, _line(entry))
                finally:
                    os.close(fd)
                self._lines += 1
        except OSError as err:
            self._fresh = False  # rewritten whole at the next change
            self.stats.errors += 1
            log.warning("the journal of holdings %s not written: %s", self.path, err.strerror)
            return
        self.stats.writes += 1
        self._wake_syncer()

    def _rewrite(self) -> None:
        """Replace the file with what is held now (write, then rename: atomic for a killed process)."""
        assert self.path is not None
        self._seq += 1
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{self._seq}")
        data = self.encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._fresh = True
        self._lines = data.count(b"\n")

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

