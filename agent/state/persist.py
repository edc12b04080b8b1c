"""What the ledger cannot re-derive from the sources, on disk: one JSON file, written atomically.

Write: temporary file in the same directory → fsync → rename over the state file → fsync the directory.
A reader therefore sees the old or the new file, never half of one. The body carries a SHA-256 so a
damaged file is told apart from a valid one; a damaged file is renamed `<name>.corrupt-<unix ms>` and
the agent starts fresh instead of failing on every start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.state.errors import StateFileError
from agent.state.records import Allocation, DrainPhase, DrainStatus, Lifecycle, Phase
from qos.model import Resources, Source

log = logging.getLogger("coloc.state")

FORMAT = "coloc-agent-state"
VERSION = 1
EPOCH_FORMAT = "coloc-agent-epoch"
MAX_STATE_BYTES = 64 << 20


class CorruptState(Exception):
    """The state file exists but is not a valid state; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class IncarnationRecord:
    incarnation: str
    boot_id: str
    started_at: float


@dataclass(frozen=True, slots=True)
class PersistedState:
    node_id: str
    incarnations: tuple[IncarnationRecord, ...] = ()  # oldest first, bounded
    highest_epoch: int = 0
    lifecycle: Lifecycle = Lifecycle.RECOVERING
    drain: DrainStatus = field(default_factory=DrainStatus)
    pending_launches: tuple[Allocation, ...] = ()
    request_ids: tuple[str, ...] = ()  # recent idempotency keys of mutating requests (drain, recommission)
    saved_at: float = 0.0


@dataclass(frozen=True, slots=True)
class LoadResult:
    state: PersistedState | None
    problem: str | None = None  # why the file was not used
    set_aside: Path | None = None  # where a corrupt file was moved


# ---- encoding -------------------------------------------------------------------------------------------

def _res(r: Resources) -> dict[str, int]:
    return {"milli_cpu": r.milli_cpu, "memory_bytes": r.memory_bytes}


def _alloc(a: Allocation) -> dict[str, Any]:
    return {
        "key": a.key, "application_id": a.application_id, "source": a.source.value,
        "resources": _res(a.resources), "phase": a.phase.value, "priority": a.priority, "cgroup": a.cgroup,
        "name": a.name, "namespace": a.namespace, "created_at": a.created_at, "started_at": a.started_at,
        "scheduler_epoch": a.scheduler_epoch, "request_id": a.request_id, "tags": [list(t) for t in a.tags],
    }


def _drain(d: DrainStatus) -> dict[str, Any]:
    prev = d.previous_batch_allocatable
    return {
        "phase": d.phase.value, "graceful": d.graceful, "wait_for_apps": d.wait_for_apps,
        "started_at": d.started_at, "deadline": d.deadline,
        "previous_batch_allocatable": None if prev is None else _res(prev),
        "request_id": d.request_id, "reason": d.reason, "waiting_applications": list(d.waiting_applications),
    }


def _body(s: PersistedState) -> dict[str, Any]:
    return {
        "node_id": s.node_id,
        "incarnations": [{"incarnation": i.incarnation, "boot_id": i.boot_id, "started_at": i.started_at}
                         for i in s.incarnations],
        "highest_epoch": s.highest_epoch,
        "lifecycle": s.lifecycle.value,
        "drain": _drain(s.drain),
        "pending_launches": [_alloc(a) for a in s.pending_launches],
        "request_ids": list(s.request_ids),
        "saved_at": s.saved_at,
    }


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode(state: PersistedState) -> bytes:
    """The file: `{"format", "sha256", "state", "version"}` on one line, the state in its canonical form
    (what the checksum covers), so it is serialised once (an indented second pass took 4x as long)."""
    body = _canonical(_body(state))
    digest = hashlib.sha256(body).hexdigest()
    return b"".join((b'{"format":', json.dumps(FORMAT).encode(), b',"sha256":"', digest.encode(),
                     b'","state":', body, b',"version":', json.dumps(VERSION).encode(), b"}\n"))


# ---- decoding (every error names the field) -------------------------------------------------------------

def _get(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise CorruptState(f"{where}{key}: missing")
    value = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise CorruptState(f"{where}{key}: expected {_kind_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise CorruptState(f"{where}{key}: expected {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _enum(cls: Any, value: Any, where: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise CorruptState(f"{where}: unknown value {value!r}") from None


def _dec_res(d: Any, where: str) -> Resources:
    if not isinstance(d, dict):
        raise CorruptState(f"{where}: expected an object")
    return Resources(_get(d, "milli_cpu", int, f"{where}."), _get(d, "memory_bytes", int, f"{where}."))


def _dec_tags(v: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, list) or not all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in v):
        raise CorruptState(f"{where}: expected a list of [key, value] string pairs")
    return tuple((t[0], t[1]) for t in v)


def _dec_alloc(d: Any, where: str) -> Allocation:
    if not isinstance(d, dict):
        raise CorruptState(f"{where}: expected an object")
    w = f"{where}."
    return Allocation(
        key=_get(d, "key", str, w), application_id=_get(d, "application_id", str, w),
        source=_enum(Source, _get(d, "source", str, w), f"{w}source"),
        resources=_dec_res(_get(d, "resources", dict, w), f"{w}resources"),
        phase=_enum(Phase, _get(d, "phase", str, w), f"{w}phase"),
        priority=_get(d, "priority", int, w), cgroup=_get(d, "cgroup", str, w), name=_get(d, "name", str, w),
        namespace=_get(d, "namespace", str, w), created_at=float(_get(d, "created_at", (int, float), w)),
        started_at=float(_get(d, "started_at", (int, float), w)),
        scheduler_epoch=_get(d, "scheduler_epoch", int, w), request_id=_get(d, "request_id", str, w),
        tags=_dec_tags(_get(d, "tags", list, w), f"{w}tags"),
    )


def _dec_drain(d: Any) -> DrainStatus:
    w = "drain."
    if not isinstance(d, dict):
        raise CorruptState("drain: expected an object")
    prev = d.get("previous_batch_allocatable")
    deadline = d.get("deadline")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))):
        raise CorruptState("drain.deadline: expected a number or null")
    waiting = _get(d, "waiting_applications", list, w)
    if not all(isinstance(x, str) for x in waiting):
        raise CorruptState("drain.waiting_applications: expected strings")
    return DrainStatus(
        phase=_enum(DrainPhase, _get(d, "phase", str, w), "drain.phase"),
        graceful=_get(d, "graceful", bool, w), wait_for_apps=_get(d, "wait_for_apps", bool, w),
        started_at=float(_get(d, "started_at", (int, float), w)),
        deadline=None if deadline is None else float(deadline),
        previous_batch_allocatable=(None if prev is None
                                    else _dec_res(prev, "drain.previous_batch_allocatable")),
        request_id=_get(d, "request_id", str, w), reason=_get(d, "reason", str, w),
        waiting_applications=tuple(waiting),
    )


def decode(data: bytes) -> PersistedState:
    """Parse and verify a state file's bytes; CorruptState names what is wrong."""
    try:
        envelope = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptState(f"not valid JSON: {err}") from None
    if not isinstance(envelope, dict):
        raise CorruptState("top level: expected an object")
    if envelope.get("format") != FORMAT:
        raise CorruptState(f"format: expected {FORMAT!r}, got {envelope.get('format')!r}")
    if envelope.get("version") != VERSION:
        raise CorruptState(f"version: this agent reads version {VERSION}, got {envelope.get('version')!r}")
    body = _get(envelope, "state", dict, "")
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    if envelope.get("sha256") != digest:
        raise CorruptState("sha256: checksum does not match the contents")
    incs = []
    for n, i in enumerate(_get(body, "incarnations", list, "")):
        if not isinstance(i, dict):
            raise CorruptState(f"incarnations[{n}]: expected an object")
        w = f"incarnations[{n}]."
        incs.append(IncarnationRecord(_get(i, "incarnation", str, w), _get(i, "boot_id", str, w),
                                      float(_get(i, "started_at", (int, float), w))))
    pending = tuple(_dec_alloc(a, f"pending_launches[{n}]")
                    for n, a in enumerate(_get(body, "pending_launches", list, "")))
    request_ids = _get(body, "request_ids", list, "")
    if not all(isinstance(x, str) for x in request_ids):
        raise CorruptState("request_ids: expected strings")
    highest = _get(body, "highest_epoch", int, "")
    if highest < 0:
        raise CorruptState(f"highest_epoch: must be ≥ 0, got {highest}")
    return PersistedState(
        node_id=_get(body, "node_id", str, ""),
        incarnations=tuple(incs),
        highest_epoch=highest,
        lifecycle=_enum(Lifecycle, _get(body, "lifecycle", str, ""), "lifecycle"),
        drain=_dec_drain(_get(body, "drain", dict, "")),
        pending_launches=pending,
        request_ids=tuple(request_ids),
        saved_at=float(_get(body, "saved_at", (int, float), "")),
    )


# ---- the file -------------------------------------------------------------------------------------------

class StateStore:
    """Reads and atomically replaces one state file. Not thread-safe: one writer at a time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # The highest scheduler epoch also lives in a second small file, so a damaged state file does not
        # take fencing with it (a stale scheduler would otherwise be obeyed again).
        self.epoch_path = self.path.with_name(f"{self.path.name}.epoch")
        self._seq = 0

    def _tmp_prefix(self) -> str:
        return f".{self.path.name}.tmp-"

    def prepare(self) -> None:
        """Create the directory (0700) and remove temporary files a killed writer left behind."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            for leftover in self.path.parent.glob(self._tmp_prefix() + "*"):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        except OSError as err:
            raise StateFileError(f"state directory {self.path.parent}: {err.strerror}") from err

    def load(self, node_id: str) -> LoadResult:
        """Read the state; a corrupt or foreign file is reported and renamed aside, never raised. The
        highest epoch is the larger of the state file's and the epoch file's."""
        result = self._load(node_id)
        kept = self.read_epoch(node_id)
        if result.state is not None:
            if kept > result.state.highest_epoch:
                return LoadResult(replace(result.state, highest_epoch=kept), result.problem, result.set_aside)
            return result
        if kept == 0:
            return result
        problem = result.problem and f"{result.problem}; highest scheduler epoch {kept} kept from " \
                                     f"{self.epoch_path.name}"
        return LoadResult(PersistedState(node_id=node_id, highest_epoch=kept), problem, result.set_aside)

    def read_epoch(self, node_id: str) -> int:
        """The epoch file's epoch; 0 when it is missing, damaged or another node's (reported, not raised)."""
        try:
            with open(self.epoch_path, "rb") as f:
                data = f.read(4096)
            d = json.loads(data)
            epoch = d["highest_epoch"]
            ok = (d.get("format") == EPOCH_FORMAT and d.get("node_id") == node_id and type(epoch) is int
                  and epoch >= 0)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.error("epoch file %s is unusable (%s); the state file's epoch is used", self.epoch_path, err)
            return 0
        if not ok:
            log.error("epoch file %s is not this node's epoch file; ignored", self.epoch_path)
            return 0
        return int(epoch)

    def write_epoch(self, node_id: str, epoch: int) -> None:
        """Record the highest epoch durably (before the call that raised it is answered)."""
        body = {"format": EPOCH_FORMAT, "node_id": node_id, "highest_epoch": epoch}
        self._replace(self.epoch_path, json.dumps(body, sort_keys=True).encode() + b"\n")

    def _load(self, node_id: str) -> LoadResult:
        self.prepare()
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return LoadResult(None)
        except IsADirectoryError:
            return self._set_aside("is a directory, not a state file")
        except OSError as err:
            raise StateFileError(f"state file {self.path}: cannot read: {err.strerror}") from err
        if len(data) > MAX_STATE_BYTES:
            return self._set_aside(f"larger than {MAX_STATE_BYTES} bytes")
        try:
            state = decode(data)
        except CorruptState as err:
            return self._set_aside(str(err))
        if state.node_id != node_id:
            return self._set_aside(f"node_id: file belongs to node {state.node_id!r}, "
                                   f"this agent is {node_id!r}")
        return LoadResult(state)

    def _set_aside(self, problem: str) -> LoadResult:
        target = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time() * 1000)}")
        n = 0
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time() * 1000)}-{n}")
        try:
            os.rename(self.path, target)
            self._fsync_dir()
        except OSError as err:
            raise StateFileError(f"state file {self.path} is unusable ({problem}) and cannot be moved aside: "
                                 f"{err.strerror}") from err
        msg = f"state file {self.path} is unusable ({problem}); moved to {target.name}, starting fresh"
        log.error(msg)
        return LoadResult(None, problem=msg, set_aside=target)

    def _fsync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write(self, state: PersistedState) -> None:
        """Replace the file with `state`: after this returns, the new state survives a power cut."""
        self.write_bytes(encode(state))

    def write_bytes(self, data: bytes) -> None:
        self._replace(self.path, data)

    def _replace(self, path: Path, data: bytes) -> None:
        self._seq += 1
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{self._seq}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            self._fsync_dir()
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StateFileError(f"state file {path}: cannot write: {err.strerror}") from err
