"""Set a systemd unit's cgroup properties at runtime over D-Bus, as the kubelet's systemd driver does.

On a node whose kubelet uses the systemd cgroup driver, the QoS tiers and pods are systemd slices. systemd
writes its own value of a property back into the cgroup on `daemon-reload`, on a `set-property` of any other
property of the unit and when a child unit starts below it, so a value written only to the file is lost
within seconds of the next pod start. A value set with `SetUnitProperties(runtime=true)` is systemd's own:
it survives all three, until reboot or until it is set again.

Only the knobs systemd has a property for go this way (`cpuset.cpus` → `AllowedCPUs`, v2 only; the CFS
quota → `CPUQuotaPerSecUSec` + `CPUQuotaPeriodUSec`; the weight → `CPUWeight` (v2) or `CPUShares` (v1);
`memory.max` → `MemoryMax`; `memory.high` → `MemoryHigh`; `memory.min` / `memory.low` → `MemoryMin` /
`MemoryLow`; one disk's `io.max` → `IOReadBandwidthMax`, `IOWriteBandwidthMax`, `IOReadIOPSMax`,
`IOWriteIOPSMax`, v2 only). A cgroup is treated as a unit only when systemd itself says that unit's
`ControlGroup` is that very cgroup: a hand-made tree whose names end in `.slice` is never sent to systemd.

The client speaks D-Bus through jeepney (pure Python) over systemd's private socket (no bus daemon needed,
root only) or the system bus. Calls are synchronous with a short timeout: they happen only when a value
changes, not every tick.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jeepney import DBusAddress, HeaderFields, Message, MessageType, new_method_call
from jeepney.io.blocking import DBusConnectionBase

from cgroups.io import IoLimit, check_device

log = logging.getLogger("coloc.systemd")

PRIVATE_SOCKET = "/run/systemd/private"
SYSTEM_BUS = "/run/dbus/system_bus_socket"
USEC_INFINITY = 2**64 - 1  # systemd's "no limit" for usec, byte and IOPS properties
_MANAGER = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                       interface="org.freedesktop.systemd1.Manager")
_BUS = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus",
                   interface="org.freedesktop.DBus")
_UNIT_SUFFIXES = (".slice", ".scope", ".service")


class SystemdError(Exception):
    """systemd could not be reached, or refused a call; the message says which and why."""


class SystemdUnreachable(SystemdError):
    """No answer from systemd (no socket, a timeout, a broken connection): worth asking again later."""


def cpu_mask(cpus: Iterable[int]) -> bytes:
    """`AllowedCPUs` as systemd takes it over D-Bus: little-endian bits, CPU n is bit n % 8 of byte n // 8."""
    cpus = sorted(set(cpus))
    if not cpus:
        return b""
    if cpus[0] < 0:
        raise ValueError(f"CPU numbers must be ≥ 0, got {cpus[0]}")
    out = bytearray(cpus[-1] // 8 + 1)
    for c in cpus:
        out[c // 8] |= 1 << (c % 8)
    return bytes(out)


def quota_properties(quota_us: int | None, period_us: int) -> list[tuple[str, tuple[str, Any]]]:
    """The CFS quota as systemd's properties: per-second quota (infinity = none) and the period."""
    per_sec = USEC_INFINITY if quota_us is None else quota_us * 1_000_000 // period_us
    return [("CPUQuotaPerSecUSec", ("t", per_sec)), ("CPUQuotaPeriodUSec", ("t", period_us))]


def memory_property(name: str, limit_bytes: int | None) -> list[tuple[str, tuple[str, Any]]]:
    return [(name, ("t", USEC_INFINITY if limit_bytes is None else limit_bytes))]


# In the order of `IoLimit.values()`; systemd's names for the four keys of a line of `io.max`.
IO_PROPERTIES = ("IOReadBandwidthMax", "IOWriteBandwidthMax", "IOReadIOPSMax", "IOWriteIOPSMax")


def block_device(dev: str) -> str:
    """A disk (`MAJ:MIN`) as the IO properties name it: `/dev/block/MAJ:MIN`."""
    # systemd takes the numbers out of this path without looking in /dev (no udev link needed), and keeps
    # one entry per path string: always this one name, or a disk would get a second entry.
    return f"/dev/block/{check_device(dev)}"


def io_properties(dev: str, limit: IoLimit) -> list[tuple[str, tuple[str, Any]]]:
    """One disk's caps as systemd's four `a(st)` properties; a lifted cap is infinity (`max` in the file)."""
    path = block_device(dev)
    return [(name, ("a(st)", [(path, USEC_INFINITY if value is None else value)]))
            for name, value in zip(IO_PROPERTIES, limit.values(), strict=True)]


def unit_name(rel: str) -> str | None:
    """The unit a cgroup path names by its last component (`a.slice/b.slice` → `b.slice`), if any."""
    leaf = rel.rstrip("/").rsplit("/", 1)[-1]
    return leaf if leaf.endswith(_UNIT_SUFFIXES) and len(leaf) > 6 else None


def open_socket(path: str, timeout_s: float) -> socket.socket:
    """Connect and authenticate (EXTERNAL) as sd-bus's own client does: `BEGIN` goes in the same write as
    `AUTH`, before the server's `OK`, so the first call always arrives in a later read.

    jeepney's handshake sends `BEGIN` after `OK`, then the call at once; when systemd (sd-bus as a
    server, v252 here) reads the two in one `read`, it leaves the call in its buffer unanswered until more
    bytes arrive. Measured in the test guest with a CPU burner beside systemd: 0 of 8 answered that way,
    8 of 8 this way (tests/systemd/test_systemd_units.py)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    deadline = time.monotonic() + timeout_s
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        sock.sendall(b"\0AUTH EXTERNAL " + str(os.geteuid()).encode().hex().encode() + b"\r\nBEGIN\r\n")
        reply = b""
        while b"\r\n" not in reply:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(256)
            if not chunk:
                raise ConnectionError("the server closed the connection during authentication")
            reply += chunk
    except BaseException:
        sock.close()
        raise
    line = reply.split(b"\r\n", 1)[0]
    if not line.startswith(b"OK "):
        sock.close()
        raise ConnectionError(f"authentication refused: {line.decode(errors='replace')[:80]}")
    sock.settimeout(None)
    return sock


class _Connection(DBusConnectionBase):  # type: ignore[misc]
    """One D-Bus connection: a method call and its reply (no signals, no filters)."""

    def call(self, msg: Message, timeout_s: float) -> tuple[Any, ...]:
        serial = next(self.outgoing_serial)
        data, _ = self._serialise(msg, serial)
        self.sock.settimeout(timeout_s)
        self.sock.sendall(data)
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(deadline)
            if reply.header.fields.get(HeaderFields.reply_serial) != serial:
                continue  # a signal or a stray reply: not ours
            if reply.header.message_type == MessageType.error:
                name = reply.header.fields.get(HeaderFields.error_name, "error")
                detail = reply.body[0] if reply.body else ""
                raise SystemdError(f"{msg.header.fields.get(HeaderFields.member)}: {name}: {detail}")
            return tuple(reply.body)


@dataclass
class SystemdUnits:
    """The units of one cgroup mount: which cgroups are units, and setting their properties at runtime.

    `mount_root` is the cgroup path (as systemd names it, from the mount's root) that the agent's relative
    paths start from: `/kubepods.slice` when the agent's root is `kubepods.slice`.
    """

    mount_root: str
    socket_path: str = ""
    timeout_s: float = 5.0
    retry_s: float = 10.0  # after no answer, calls fail at once this long (each could block timeout_s)

    def __post_init__(self) -> None:
        self._conn: _Connection | None = None
        self._units: dict[str, bool] = {}  # rel -> whether systemd owns that cgroup as a unit
        self._warned = False
        self._silent_until = 0.0
        self._last_failure = ""
        self.errors = 0

    # -- connection --------------------------------------------------------------------------------

    def _connect(self) -> _Connection:
        if self._conn is not None:
            return self._conn
        paths = [self.socket_path] if self.socket_path else [PRIVATE_SOCKET, SYSTEM_BUS]
        errors = []
        for path in paths:
            try:
                sock = open_socket(path, self.timeout_s)
            except (OSError, TimeoutError, ValueError) as err:
                errors.append(f"{path}: {self._failure(err)}")
                continue
            conn = _Connection(sock)
            # A bus daemon wants Hello first; systemd's own socket is no bus and does not.
            if os.path.basename(path) != "private":
                try:
                    conn.call(new_method_call(_BUS, "Hello"), self.timeout_s)
                except (OSError, TimeoutError, SystemdError) as err:
                    conn.close()
                    errors.append(f"{path}: Hello: {self._failure(err)}")
                    continue
            self._conn = conn
            return conn
        raise SystemdUnreachable("cannot reach systemd over D-Bus (" + "; ".join(errors) + ")")

    def _call(self, msg: Message) -> tuple[Any, ...]:
        if time.monotonic() < self._silent_until:
            raise SystemdUnreachable(f"not asked: systemd did not answer less than {self.retry_s:g} s ago "
                                     f"({self._last_failure})")
        try:
            conn = self._connect()
            reply = conn.call(msg, self.timeout_s)
        except SystemdUnreachable as err:
            self._unreachable(str(err))
            raise
        except (OSError, TimeoutError) as err:
            self.close()
            why = f"D-Bus call to systemd failed: {self._failure(err)}"
            self._unreachable(why)
            raise SystemdUnreachable(why) from None
        except SystemdError:
            self.errors += 1
            raise
        if self._warned:
            self._warned = False
            log.info("systemd answers again; unit properties are set through it")
        return reply

    def _failure(self, err: Exception) -> str:
        if isinstance(err, TimeoutError):  # jeepney's carries no message
            return f"no answer in {self.timeout_s:g} s"
        return str(err) or type(err).__name__

    def _unreachable(self, why: str) -> None:
        self.errors += 1
        self._last_failure = why
        self._silent_until = time.monotonic() + self.retry_s

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def available(self) -> bool:
        """True when systemd answers (its version is read)."""
        try:
            self.version()
        except SystemdError:
            return False
        return True

    def version(self) -> str:
        props = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                            interface="org.freedesktop.DBus.Properties")
        body = self._call(new_method_call(props, "Get", "ss", (_MANAGER.interface, "Version")))
        return str(body[0][1])

    # -- units ---------------------------------------------------------------------------------------

    def cgroup_path(self, rel: str) -> str:
        base = self.mount_root.rstrip("/")
        return f"{base}/{rel}" if rel else (base or "/")

    def owns(self, rel: str) -> bool:
        """Whether `rel` is a unit systemd manages (its ControlGroup is this cgroup); remembered per path.
        The root itself ("") is its mount root's unit (`kubepods.slice`): its knobs are held through systemd
        too, or a daemon-reload puts systemd's values back (seen in the v2 guest: memory QoS's sums)."""
        known = self._units.get(rel)
        if known is not None:
            return known
        name = unit_name(self.cgroup_path(rel))
        owned = False
        if name is not None:
            try:
                owned = self._control_group(name) == self.cgroup_path(rel)
            except SystemdUnreachable as err:
                if not self._warned:
                    self._warned = True
                    log.warning("systemd did not answer; cgroup files alone are written until it does",
                                extra={"fields": {"cgroup": rel, "why": str(err)}})
                return False  # not remembered: asked again next time
            except SystemdError as err:
                log.info("cgroup is not a systemd unit we can set", extra={"fields": {"cgroup": rel,
                                                                                       "why": str(err)}})
        self._units[rel] = owned
        return owned

    def knows(self, rel: str) -> bool:
        """Whether `owns(rel)` has an answer from systemd (False while systemd did not answer)."""
        return rel in self._units

    def forget(self, rel: str) -> None:
        prefix = rel + "/"
        for r in [r for r in self._units if r == rel or r.startswith(prefix) or not rel]:
            del self._units[r]

    def _control_group(self, unit: str) -> str:
        (path,) = self._call(new_method_call(_MANAGER, "GetUnit", "s", (unit,)))
        props = DBusAddress(str(path), bus_name="org.freedesktop.systemd1",
                            interface="org.freedesktop.DBus.Properties")
        for iface in ("org.freedesktop.systemd1.Slice", "org.freedesktop.systemd1.Scope",
                      "org.freedesktop.systemd1.Service"):
            try:
                (value,) = self._call(new_method_call(props, "Get", "ss", (iface, "ControlGroup")))
            except SystemdError:
                continue
            return str(value[1])
        raise SystemdError(f"unit {unit} has no ControlGroup")

    def set_properties(self, rel: str, properties: Sequence[tuple[str, tuple[str, Any]]]) -> None:
        """`SetUnitProperties(unit, runtime=true, ...)` on the unit of `rel` (`owns` must accept it)."""
        name = unit_name(self.cgroup_path(rel))
        if name is None:
            raise SystemdError(f"{rel!r} names no systemd unit")
        self._call(new_method_call(_MANAGER, "SetUnitProperties", "sba(sv)", (name, True, list(properties))))
        log.debug("unit property set",
                  extra={"fields": {"unit": name, "properties": [p[0] for p in properties]}})

    def unit_properties(self, rel: str, names: Sequence[str]) -> dict[str, Any]:
        """Read some of a unit's properties (tests and diagnostics)."""
        name = unit_name(self.cgroup_path(rel))
        if name is None:
            raise SystemdError(f"{rel!r} names no systemd unit")
        (path,) = self._call(new_method_call(_MANAGER, "GetUnit", "s", (name,)))
        props = DBusAddress(str(path), bus_name="org.freedesktop.systemd1",
                            interface="org.freedesktop.DBus.Properties")
        iface = {"slice": "Slice", "scope": "Scope", "service": "Service"}[name.rsplit(".", 1)[1]]
        out: dict[str, Any] = {}
        for prop in names:
            get = new_method_call(props, "Get", "ss", (f"org.freedesktop.systemd1.{iface}", prop))
            (value,) = self._call(get)
            out[prop] = value[1]
        return out
