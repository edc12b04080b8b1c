"""PSI triggers on HP cgroups' `cpu.pressure`, delivered by the asyncio loop with no thread and no poll.

A trigger fd signals POLLPRI, but its poll() always reports POLLIN|POLLOUT too, so `loop.add_reader` on it
would fire on every loop iteration (a busy loop). Each trigger fd therefore sits in a private epoll set
that waits for EPOLLPRI only, and that set's own fd goes to `add_reader`: it is readable exactly when the
kernel has an event. EPOLLERR means the cgroup is gone; the trigger is then dropped.

Kernel rules (Documentation/accounting/psi.rst): one trigger per fd opened O_RDWR, alive until the fd is
closed; "<some|full> <stall us> <window us>" with a window of 500 ms to 10 s; windows under 2 s need
CAP_SYS_RESOURCE (EINVAL without it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
from collections.abc import Callable, Sequence

log = logging.getLogger("coloc.psi")

PSI_TRIGGER = "psi-trigger"
ADAPTIVE_POLL = "adaptive-poll"
OFF = "off"


class TriggerRefused(Exception):
    """The kernel would not register the trigger; the message says why."""


class _Trigger:
    """One registered trigger and the epoll set that waits for its events."""

    def __init__(self, path: str, spec: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            raise TriggerRefused(f"open {path}: {os.strerror(err.errno or 0)}") from None
        try:
            os.write(self.fd, spec.encode() + b"\0")
            self.ep = select.epoll()
        except OSError as err:
            os.close(self.fd)
            why = _refusal_reason(spec) if err.errno == errno.EINVAL else ""
            raise TriggerRefused(f"write {spec!r} to {path}: {os.strerror(err.errno or 0)}"
                                 + (f" ({why})" if why else "")) from None
        self.ep.register(self.fd, select.EPOLLPRI)

    def gone(self) -> bool:
        """Consume the pending event; True when the cgroup was removed (EPOLLERR)."""
        return any(ev & select.EPOLLERR for _, ev in self.ep.poll(0))

    def close(self) -> None:
        self.ep.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


def probe(path: str, spec: str) -> str:
    """"" when the kernel accepts `spec` on `path` (registered and removed at once), else why not."""
    try:
        _Trigger(path, spec).close()
    except TriggerRefused as err:
        return str(err)
    return ""


class PsiWaker:
    """Keeps one trigger on each of a changing set of `cpu.pressure` files and calls `on_event` on the loop
    whenever one of them fires."""

    def __init__(self, loop: asyncio.AbstractEventLoop, spec: str, on_event: Callable[[], None]) -> None:
        self._loop = loop
        self._spec = spec
        self._on_event = on_event
        self._triggers: dict[str, _Trigger] = {}
        self.events = 0
        self.refused = 0

    @property
    def paths(self) -> list[str]:
        return sorted(self._triggers)

    def sync(self, paths: Sequence[str]) -> None:
        """Register triggers on `paths` that have none; remove those not in `paths`."""
        want = set(paths)
        for path in set(self._triggers) - want:
            self._drop(path)
        for path in want - set(self._triggers):
            try:
                trig = _Trigger(path, self._spec)
            except TriggerRefused as err:
                self.refused += 1
                log.debug("PSI trigger not registered: %s", err)
                continue
            self._triggers[path] = trig
            self._loop.add_reader(trig.ep.fileno(), self._ready, path)

    def _ready(self, path: str) -> None:
        trig = self._triggers.get(path)
        if trig is None:
            return
        if trig.gone():
            self._drop(path)
            return
        self.events += 1
        self._on_event()

    def _drop(self, path: str) -> None:
        trig = self._triggers.pop(path)
        self._loop.remove_reader(trig.ep.fileno())
        trig.close()

    def close(self) -> None:
        for path in list(self._triggers):
            self._drop(path)


def _refusal_reason(spec: str) -> str:
    """Why the kernel said EINVAL: a window it never takes, or one under 2 s without CAP_SYS_RESOURCE."""
    parts = spec.split()
    window = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0
    if not 500_000 <= window <= 10_000_000:
        return "the kernel takes windows of 500 ms to 10 s"
    if window < 2_000_000 and not _has_sys_resource():
        return "windows under 2 s need CAP_SYS_RESOURCE"
    return ""


def _has_sys_resource() -> bool:
    """CAP_SYS_RESOURCE (24) in this process's effective set."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 24 & 1)
    except OSError:
        pass
    return False
