"""Helpers for the API tests: short socket directories, ids, a scheduler's Admit request, and the replica a
watcher keeps."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent.api.client import Marker
from agent.state import AdmitRequest, Event, EventType, LedgerView
from agent.state.records import Allocation, Application, NodeRecord
from kit.snapshot import application_id, container_id
from qos.model import Resources, Source

cid = container_id  # container `seq` of application `app`: container_e01_<ts>_<app>_01_<seq>
app_id = application_id


@contextmanager
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    d = Path(tempfile.mkdtemp(prefix="coloc-api-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def admit_request(app: int, seq: int, cpu: int = 100, mem: int = 64 << 20, **more: Any) -> AdmitRequest:
    """A scheduler's request to place YARN container `seq` of application `app`, asking for `cpu` milli-CPU
    and `mem` bytes, with request id `req-<app>-<seq>` unless `request_id` says otherwise; any other
    `AdmitRequest` field by its name in `more`."""
    more.setdefault("request_id", f"req-{app}-{seq}")
    return AdmitRequest(key=f"yarn/{cid(app, seq)}", application_id=app_id(app), source=Source.YARN,
                        resources=Resources(cpu, mem), **more)


class Mirror:
    """Applies a snapshot and then watch events, as a scheduler would; `matches` compares with a snapshot.

    Notices and markers advance the revision only. Revisions must be contiguous, an allocation comes after
    its application, and an application is not deleted while an allocation still refers to it."""

    def __init__(self, view: LedgerView) -> None:
        self.incarnation = view.identity.incarnation
        self.revision = view.revision
        self.node: NodeRecord = view.node
        self.apps: dict[str, Application] = {a.application_id: a for a in view.applications}
        self.allocs: dict[str, Allocation] = {a.key: a for a in view.allocations}
        self.history: dict[int, tuple[NodeRecord, tuple[Application, ...], tuple[Allocation, ...]]] = {}
        self._remember()

    def _remember(self) -> None:
        self.history[self.revision] = (
            self.node,
            tuple(self.apps[k] for k in sorted(self.apps)),
            tuple(self.allocs[k] for k in sorted(self.allocs)),
        )

    def apply(self, item: Event | Marker) -> None:
        if isinstance(item, Marker):
            assert item.revision >= self.revision, f"marker at {item.revision} behind {self.revision}"
            assert item.revision == self.revision, (
                f"marker at {item.revision} skips events after {self.revision}"
            )
            return
        assert item.revision == self.revision + 1, f"event {item.revision} after {self.revision}"
        obj = item.obj
        if isinstance(obj, NodeRecord):
            self.node = obj
        elif isinstance(obj, Application):
            if item.type is EventType.DELETED:
                assert not any(a.application_id == obj.application_id for a in self.allocs.values()), (
                    f"application {obj.application_id} deleted while allocations still refer to it"
                )
                del self.apps[obj.application_id]
            else:
                self.apps[obj.application_id] = obj
        elif isinstance(obj, Allocation):
            if item.type is EventType.DELETED:
                del self.allocs[obj.key]
            else:
                assert obj.application_id in self.apps, f"{obj.key} arrived before its application"
                self.allocs[obj.key] = obj
        self.revision = item.revision
        self._remember()

    def matches(self, view: LedgerView) -> bool:
        """Whether the replica is `view`: at its revision, with its node, applications and allocations."""
        return self.revision == view.revision and self.state_at(self.revision) == self.of(view)

    def state_at(self, revision: int) -> tuple[NodeRecord, tuple[Application, ...], tuple[Allocation, ...]]:
        return self.history[revision]

    @staticmethod
    def of(view: LedgerView) -> tuple[NodeRecord, tuple[Application, ...], tuple[Allocation, ...]]:
        return view.node, view.applications, view.allocations


def changes_socket(sock: str) -> str:
    """Where the bench's scheduler sends Admit: the admin socket beside `sock` when the agent serves one (the
    read socket refuses changes), else `sock` itself (before issue 24 one socket served every method; the
    side-by-side runs of docs/dependencies.md run that commit too)."""
    admin = Path(sock).with_name("admin.sock")
    return str(admin) if admin.exists() else sock
