"""The metrics server under a flood: a real `coloc-agent run` process on a private cgroup root (real
cgroups), real TCP connections from this process. 3,000 connections that never send a request must not
starve the loop nor `/healthz`; 50 scrapers at once must not slow the tick."""

from __future__ import annotations

import resource
import socket
import threading
import time
from pathlib import Path

import pytest
from kit.agentproc import agent_config, get, metric, running_agent
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups, pytest.mark.slow, pytest.mark.timing]

INTERVAL_S = 0.2


def _raise_fd_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def _open_idle(port: int, n: int) -> list[socket.socket]:
    """`n` connections that send the start of a request and then nothing more (slowloris), opened from 30
    threads; each connect waits up to 1 s for the server to take it, as a patient attacker's would."""
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


def test_3000_idle_connections_keep_tick_cadence_and_healthz(real_root: RealRoot, tmp_path: Path) -> None:
    _raise_fd_limit(4000)
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    with running_agent(cfg, tmp_path / "agent.log") as proc:
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30), (tmp_path / "agent.log").read_text()
        ticks0, t0 = metric(port, "coloc_ticks_total"), time.monotonic()
        opened = time.monotonic()
        socks = _open_idle(port, 3000)
        opened = time.monotonic() - opened
        healthz: list[int] = []
        try:
            end = time.monotonic() + 10
            while time.monotonic() < end:
                try:
                    healthz.append(get(f"http://127.0.0.1:{port}/healthz", timeout=2)[0])
                except OSError:
                    healthz.append(0)
                time.sleep(0.5)
            ticks1, t1 = metric(port, "coloc_ticks_total", timeout=5), time.monotonic()
            threads = int(_status(proc.pid, "Threads"))
            rss = _status(proc.pid, "VmHWM")
        finally:
            for s in socks:
                s.close()
        assert proc.poll() is None
    cadence = (ticks1 - ticks0) / ((t1 - t0) / INTERVAL_S)
    print(f"3000 connections opened in {opened:.1f} s; cadence {cadence:.3f} over {t1 - t0:.1f} s; "
          f"threads {threads}, RSS high-water {rss}; "
          f"healthz {healthz}")
    assert cadence >= 0.95, cadence
    assert healthz and all(code == 200 for code in healthz), healthz
    assert threads <= 64, f"{threads} threads: concurrency is not bounded"
    assert opened < 30, f"the server took {opened:.0f} s to take 3000 connections"


def _status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return "?"


def test_50_concurrent_scrapers_do_not_slow_the_tick(real_root: RealRoot, tmp_path: Path) -> None:
    port = free_port()
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", port)
    with running_agent(cfg, tmp_path / "agent.log"):
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30), (tmp_path / "agent.log").read_text()
        time.sleep(2)
        quiet = _tick_mean(port, 4.0)
        stop = threading.Event()
        answered = [0] * 50

        def scrape(i: int) -> None:
            while not stop.is_set():
                try:
                    get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                    answered[i] += 1
                except OSError:
                    pass

        threads = [threading.Thread(target=scrape, args=(i,), daemon=True) for i in range(50)]
        for t in threads:
            t.start()
        try:
            time.sleep(1)
            loaded = _tick_mean(port, 4.0)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
    print(f"tick mean quiet {quiet * 1000:.2f} ms, under 50 scrapers {loaded * 1000:.2f} ms; "
          f"scrapes answered {sum(answered)}")
    assert sum(answered) > 50
    assert loaded <= 2 * quiet + 0.001, (quiet, loaded)


def _tick_mean(port: int, window_s: float) -> float:
    """Mean tick duration over `window_s`, from the agent's own histogram."""
    name = "coloc_tick_duration_seconds"
    s0, c0 = metric(port, name + "_sum"), metric(port, name + "_count")
    time.sleep(window_s)
    s1, c1 = metric(port, name + "_sum"), metric(port, name + "_count")
    assert c1 > c0
    return (s1 - s0) / (c1 - c0)
