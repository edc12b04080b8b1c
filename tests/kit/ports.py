"""Local sockets for test servers, agents and their clients: free ports, and enough file descriptors."""

from __future__ import annotations

import resource
import socket
import threading


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_fd_limit(want: int | None = None) -> int:
    """Raise this process's open-file limit (and so its children's) to `want`, at most to the hard limit
    (to the hard limit when `want` is None); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if want is None or (hard != resource.RLIM_INFINITY and want > hard) else want
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def open_idle(port: int, n: int) -> list[socket.socket]:
    """`n` connections that send the start of a request and then nothing more, opened from 30 threads; each
    connect waits up to 1 s for the server to take it, as a patient attacker's would."""
    socks: list[socket.socket] = []
    lock = threading.Lock()

    def attacker(count: int) -> None:
        for _ in range(count):
            s = socket.socket()
            s.settimeout(1.0)
            with lock:
                socks.append(s)
            try:
                s.connect(("127.0.0.1", port))
                s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass

    threads = [threading.Thread(target=attacker, args=(n // 30,), daemon=True) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return socks
