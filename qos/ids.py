"""Strict parsing of the ids that end up in cgroup paths and API calls: pod UIDs and YARN ids.

YARN formats (`ApplicationId`, `ContainerId.toString`): `application_<clusterTs>_<seq, ≥4 digits>` and
`container_[e<epoch, ≥2 digits>_]<clusterTs>_<appSeq ≥4>_<attempt ≥2>_<containerSeq ≥6>`; numbers are
zero-padded to their minimum width and never longer with a leading zero; epoch 0 is omitted.
Anything else is rejected with the reason, before it can touch a path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# API-server pods have RFC 4122 UIDs; static pods read from files have a 32-hex hash as UID.
_UID = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$")
_APP = re.compile(r"^application_([0-9]{1,19})_([0-9]{4,10})$")
_CONTAINER = re.compile(
    r"^container_(?:e([0-9]{2,8})_)?([0-9]{1,19})_([0-9]{4,10})_([0-9]{2,10})_([0-9]{6,13})$")
_CONTAINER_FORMAT = "container_[e<epoch>_]<clusterTs>_<appSeq≥4>_<attempt≥2>_<containerSeq≥6>"


class IdError(ValueError):
    """An id is not in its strict format; the message quotes it (shortened) and says why."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _canonical(digits: str, width: int) -> bool:
    """Hadoop pads to `width`; a longer number never starts with 0."""
    return len(digits) == width or digits[0] != "0"


def check_pod_uid(uid: object) -> str:
    if not isinstance(uid, str) or not _UID.fullmatch(uid):
        raise IdError(f"pod UID {_show(uid)} is not a lower-case UID (8-4-4-4-12 hex, or 32 hex)")
    return uid


@dataclass(frozen=True, slots=True, order=True)
class ContainerId:
    """A parsed YARN container id; ordering is oldest → newest."""

    cluster_ts: int
    app_seq: int
    attempt: int
    epoch: int
    seq: int
    text: str

    @property
    def app_id(self) -> str:
        return f"application_{self.cluster_ts}_{self.app_seq:04d}"

    @property
    def is_am(self) -> bool:
        return self.seq == 1


def parse_app_id(value: object) -> str:
    if not isinstance(value, str):
        raise IdError(f"application id {_show(value)} is not a string")
    m = _APP.fullmatch(value)
    if not m or not _canonical(m.group(2), 4) or m.group(1).startswith("0"):
        raise IdError(f"application id {_show(value)} does not match application_<clusterTs>_<seq≥4 digits>")
    return value


def parse_container_id(value: object) -> ContainerId:
    if not isinstance(value, str):
        raise IdError(f"container id {_show(value)} is not a string")
    if not re.fullmatch(r"[A-Za-z0-9_]{1,96}", value):
        raise IdError(f"container id {_show(value)} has characters outside [A-Za-z0-9_] or is too long")
    m = _CONTAINER.fullmatch(value)
    if not m:
        raise IdError(f"container id {_show(value)} does not match {_CONTAINER_FORMAT}")
    epoch, ts, app, attempt, seq = m.groups()
    if epoch is not None and (not _canonical(epoch, 2) or int(epoch) == 0):
        raise IdError(f"container id {_show(value)}: epoch {epoch!r} is not canonical")
    if ts.startswith("0"):
        raise IdError(f"container id {_show(value)}: cluster timestamp has a leading zero")
    for digits, width, what in ((app, 4, "application sequence"), (attempt, 2, "attempt"),
                                (seq, 6, "container sequence")):
        if not _canonical(digits, width):
            raise IdError(f"container id {_show(value)}: {what} {digits!r} is not canonical")
    if int(seq) == 0 or int(attempt) == 0:
        raise IdError(f"container id {_show(value)}: attempt and container sequence start at 1")
    return ContainerId(int(ts), int(app), int(attempt), int(epoch or 0), int(seq), value)
