"""The systemd client when systemd does not answer: a clear reason, and no call again for `retry_s`.

Runs on this host against a D-Bus socket path that does not exist and a unix socket that accepts and
never answers (a hung systemd): both real sockets, no systemd needed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cgroups.systemd import SystemdUnits, SystemdUnreachable


def test_a_missing_socket_is_named_and_not_dialled_again_until_retry_s(tmp_path: Path) -> None:
    units = SystemdUnits("/kubepods.slice", socket_path=str(tmp_path / "private"), retry_s=3600)
    with pytest.raises(SystemdUnreachable, match="private"):
        units.version()
    assert units.errors == 1
    (tmp_path / "private").write_text("")  # were it dialled again, the error would differ
    with pytest.raises(SystemdUnreachable, match="not asked: systemd did not answer less than 3600 s ago"):
        units.version()
    assert units.errors == 1, "a call inside retry_s must not dial"
    assert not units.owns("kubepods-besteffort.slice") and not units.knows("kubepods-besteffort.slice")


@pytest.fixture(params=["private", "system_bus_socket"])
def hung(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A unix socket that completes D-Bus's auth exchange and then never answers a call: named as
    systemd's own socket (called at once) or as the system bus (a Hello first)."""
    path = str(tmp_path / request.param)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            held.append(conn)
            buf = b""
            while b"BEGIN\r\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                buf += chunk
                if b"AUTH" in chunk:
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                if b"NEGOTIATE_UNIX_FD" in chunk:
                    conn.sendall(b"AGREE_UNIX_FD\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield path
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()


def test_a_hung_systemd_times_out_with_the_reason_and_is_left_alone_for_retry_s(hung: str) -> None:
    units = SystemdUnits("/kubepods.slice", socket_path=hung, timeout_s=0.3, retry_s=3600)
    started = time.monotonic()
    with pytest.raises(SystemdUnreachable, match=r"no answer in 0.3 s"):
        units.version()
    first = time.monotonic() - started
    started = time.monotonic()
    with pytest.raises(SystemdUnreachable, match="not asked"):
        units.version()
    assert time.monotonic() - started < first, "the second call waited for systemd again"
    assert units.errors == 1
