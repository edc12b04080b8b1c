"""The demo's live view, a process of its own: `python -m agent.demo.live SPEC_FILE`.

Every `every_s` on its own clock it prints one line (`--quiet`: a short one every QUIET_EVERY_S): the
elapsed time, the phase, HP throughput and CPU, HP's wake-up p99 over the last second, the BE budget and
what BE used. It measures what it can itself (HP's work counters, the tiers' CPU from cgroupfs, the wake-up
probe's file) and takes the rest (the phase, the agent's budget, BE's cpus, memory, evictions) from the
state file the demo rewrites as they change, saying how old that is when the demo has fallen behind.

A process, not a thread of the demo: the demo's process sits in the agent's pod (`cpu.shares` 51) and is
blocked or starved whenever the machine is busy (a fork to start a BE process holds the GIL; a pod of 51
shares on a machine at load 10 gets a few ms of CPU a second), and a thread would wait with it. This one
stays in the cgroup the demo was started from. It writes each line with one `write` (whole lines, never
mixed with the demo's own), appends each row to the samples file (the demo's plots and summary), ignores
Ctrl-C (the demo goes on printing while it cleans up) and ends when the demo stops it or is gone.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agent.demo.workloads import read_counter
from cgroups.discovery import discover
from cgroups.errors import CgroupGone
from cgroups.reader import CgroupReader

QUIET_EVERY_S = 3.0
STALE_S = 1.5  # the demo's state older than this is flagged on the line


@dataclass(frozen=True)
class Spec:
    """What the printer reads, fixed for the run (the demo writes it before it starts the printer)."""

    cgroup_mount: str
    cgroup_root: str
    hp: str  # the HP tier's cgroup, relative to the root
    be: str  # the BE tier's
    probe: str  # the wake-up probe's file (int32 µs late per wake-up)
    state: str  # the demo's state file (JSON, replaced whole)
    samples: str  # where each row goes (JSON lines)
    t0: float  # the demo's start (CLOCK_MONOTONIC: one clock for every process)
    live: bool = True
    every_s: float = 1.0

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))


@dataclass
class State:
    """What only the demo knows; `at` is when it wrote it (monotonic)."""

    phase: str = "starting"
    counters: list[str] = field(default_factory=list)
    budget_milli: int = -1
    be_cpus: str = "-"
    mem_pct: float = 0.0
    evictions: int = 0
    at: float = 0.0

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, path)  # the printer reads a whole file, old or new


def read_state(path: str) -> State:
    try:
        with open(path) as f:
            return State(**json.load(f))
    except (OSError, ValueError, TypeError):
        return State()


def probe_offset(path: str) -> int:
    """The probe file's length in whole records."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0
    return size - size % 4


def probe_p99_ms(path: str, start: int, end: int) -> float | None:
    """p99 of how late the probe's wake-ups were (ms) between two offsets of its file."""
    if end <= start:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except OSError:  # gone at the very end
        return None
    late = sorted(struct.unpack(f"<{len(data) // 4}i", data[: len(data) // 4 * 4]))
    return round(late[min(len(late) - 1, int(0.99 * len(late)))] / 1e3, 3) if late else None


def out(text: str) -> None:
    """One line, one write: lines from the demo and from here never mix."""
    os.write(sys.stdout.fileno(), (text + "\n").encode())


class Printer:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.reader = CgroupReader(discover(base=Path(spec.cgroup_mount)), spec.cgroup_root, psi=False,
                                   memory_psi=False, memory_limit=False)
        self.shown_at = 0.0
        self.unreadable: set[str] = set()

    def cpu_ns(self, rel: str) -> int:
        try:
            return self.reader.cpu_usage(rel)[1]
        except CgroupGone:  # not made yet, or gone: no CPU to count
            return 0
        except Exception as err:  # said once per cgroup, then counted as no CPU: the view goes on
            if rel not in self.unreadable:
                self.unreadable.add(rel)
                out(f"{time.monotonic() - self.spec.t0:6.1f}s  (live view: cannot read {rel}'s CPU: {err!r})")
            return 0

    def read(self, state: State) -> tuple[float, int, int, int, int]:
        """(when, HP's work count, HP's and BE's CPU ns, the probe file's length) now."""
        return (time.monotonic(), sum(read_counter(c) for c in state.counters), self.cpu_ns(self.spec.hp),
                self.cpu_ns(self.spec.be), probe_offset(self.spec.probe))

    def run(self, done: Callable[[], bool]) -> None:
        """Print every `every_s` until `done()` is true."""
        spec = self.spec
        prev = self.read(read_state(spec.state))
        # on the demo's whole periods (lines at 1.0 s, 2.0 s, ...), the first one at least half a period on
        due = spec.t0 + spec.every_s * (math.floor((prev[0] - spec.t0) / spec.every_s + 0.5) + 1)
        with open(spec.samples, "a") as samples:
            while not done():
                time.sleep(max(0.0, due - time.monotonic()))
                due += spec.every_s
                state = read_state(spec.state)
                try:
                    cur = self.read(state)
                    if due <= cur[0]:  # this process itself was held up past a period: one line, then on time
                        due = cur[0] + spec.every_s
                    row = self.row(state, cur, prev)
                    prev = cur
                except Exception as err:  # a line that cannot be made is said: never a silent view
                    out(f"{time.monotonic() - spec.t0:6.1f}s  {state.phase:<22} (live view: {err!r})")
                    continue
                samples.write(json.dumps(row) + "\n")
                samples.flush()

    def row(self, state: State, cur: tuple[float, int, int, int, int],
            prev: tuple[float, int, int, int, int]) -> dict[str, object]:
        spec = self.spec
        now, dt = cur[0], max(cur[0] - prev[0], 1e-6)
        p99 = probe_p99_ms(spec.probe, prev[4], cur[4])
        row: dict[str, object] = {
            "t": round(now - spec.t0, 1), "hp_units_per_s": round((cur[1] - prev[1]) / dt),
            "hp_milli_cpu": round((cur[2] - prev[2]) / 1e6 / dt), "be_budget_milli_cpu": state.budget_milli,
            "be_milli_cpu": round((cur[3] - prev[3]) / 1e6 / dt), "mem_pct": state.mem_pct,
            "evictions": state.evictions, "hp_p99_ms": p99 if p99 is not None else -1.0}
        grant = f"{state.budget_milli:>5}m" if state.budget_milli >= 0 else "    -"
        tail = f"{p99:.2f}" if p99 is not None else "-"
        age = now - state.at if state.at else 0.0
        late = f"  (the demo's view {age:.1f} s old)" if age > STALE_S else ""
        if spec.live:
            out(f"{row['t']:6.1f}s  {state.phase:<22} HP {row['hp_units_per_s']:>7}/s "
                f"{row['hp_milli_cpu']:>5}m  HP wake-up p99 {tail:>5} ms  BE budget {grant} "
                f"cpus {state.be_cpus:<4} used {row['be_milli_cpu']:>5}m  mem {state.mem_pct:>5}%  "
                f"evictions {state.evictions}{late}")
        elif now - self.shown_at >= QUIET_EVERY_S - 0.5:
            self.shown_at = now
            out(f"{row['t']:6.1f}s  {state.phase}: HP {row['hp_units_per_s']}/s, wake-up p99 {tail} ms, "
                f"BE budget {grant.strip()}{late}")
        return row


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the demo's to handle; it stops this at the end
    spec = Spec(**json.loads(Path(argv[0]).read_text()))
    parent = os.getppid()
    printer = Printer(spec)
    try:
        printer.run(lambda: os.getppid() != parent)
    finally:
        printer.reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
