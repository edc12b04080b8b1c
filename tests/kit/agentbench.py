"""The agent process a bench measures (bench/footprint.py, bench/soak.py): its /metrics text, the wait until
it ticks, a scheduler's Watch held open from another process, and its memory from /proc."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A scheduler's node-side client: one Watch held open. The server ends a stream at its maximum connection
# age (15 min) and the client watches again, as a scheduler's does; `watching` once the first batch came.
WATCHER = ("import asyncio, sys\n"
           "from agent.api.client import AgentCallError, AgentClient\n"
           "async def main():\n"
           "    first = True\n"
           "    while True:\n"
           "        try:\n"
           "            async with AgentClient(sys.argv[1]) as c:\n"
           "                stream = c.watch(send_initial=True)\n"
           "                await anext(stream)\n"
           "                if first:\n"
           "                    print('watching', flush=True)\n"
           "                    first = False\n"
           "                async for _ in stream:\n"
           "                    pass\n"
           "        except AgentCallError as err:\n"
           "            if 'max connection age' not in str(err):\n"
           "                raise\n"
           "asyncio.run(main())\n")

MEMORY_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads")


def metrics_text(port: int, timeout: float = 5.0) -> str:
    """The agent's /metrics on 127.0.0.1:`port`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode())


def ticks(text: str) -> float:
    """`coloc_ticks_total` of a /metrics text; 0 when it is not there yet."""
    for line in text.splitlines():
        if line.startswith("coloc_ticks_total "):
            return float(line.split()[-1])
    return 0.0


def wait_ticking(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    """Return once the agent has ticked twice; raise with the end of its `log` if it exits or does not tick
    within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"agent exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
        try:
            if ticks(metrics_text(port)) >= 2:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"agent not ticking after {timeout}s:\n{log.read_text()[-2000:]}")


def start_watcher(sock: Path, log: Path) -> subprocess.Popen[bytes]:
    """A Watch on the node API at `sock` held open from another process (its errors go to `log`); returns
    once its first batch arrived."""
    with log.open("ab") as f:
        proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(sock)], stdout=subprocess.PIPE, stderr=f,
                                cwd=REPO)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"watching":
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"the watcher got no first batch:\n{log.read_text()[-2000:]}")
    return proc


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile (KiB) and Threads of /proc/PID/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in MEMORY_KEYS:
            out[key] = int(value.split()[0])
    return out
