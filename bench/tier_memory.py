"""The BE tier's memory cap: a BE memory hog larger than the batch budget beside an HP service, per cap mode.

On a private cgroup root `coloc-bench-<pid>` acting as a small node (its memory limit `--node-mib`, 1536 MiB),
laid out as the kubelet lays it out (`burstable/`, `besteffort/`):

- **HP service** (`burstable/pod-hp`): reads random 4 KiB pages of a `--hp-file-mib` (640 MiB) file through
  mmap, its working set in the page cache (charged to it: the file's cache is dropped before it starts);
  work units = pages read per second; major faults from /proc/<pid>/stat.
- **BE hog** (`besteffort/pod-hog`): grows anonymous memory by 16 MiB every 20 ms up to `--hog-mib`
  (1200 MiB),
  far above the batch budget `--budget-mib` (512 MiB), then holds it. No swap here: anonymous memory cannot be
  reclaimed, so what a hog takes beyond the node's room comes out of HP's page cache, then an OOM kill.
- **Cases**, alternated over `--rounds`: `alone` (HP only), `off` (no cap), `high` (memory.high = budget;
  cgroup v1 has no memory.high and the writer sets the soft limit), `high+max` (high = 90 % of the budget,
  memory.max / memory.limit_in_bytes = budget). The cap is put in place by the agent's own executor
  (`TierMemoryExecutor`) from `qos.tier_memory.tier_memory_cap`, as its periodic pass does.

Per case: HP pages/s (ratio to alone), HP major faults, HP OOM kills (HP killed or `oom_kill` in its cgroup),
whether the hog was OOM-killed and where. Last line: one JSON object (units in key names).

    sudo python3 bench/tier_memory.py [--rounds 3] [--seconds 8] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kit.bench import drop_cache
from kit.realcg import write_file

from agent.executors.batch_limits import TierMemoryExecutor
from cgroups.discovery import Hierarchy, discover
from cgroups.writer import CgroupWriter
from qos.tier_memory import HIGH, HIGH_MAX, OFF, tier_memory_cap

MI = 1 << 20
CASES = ("alone", OFF, HIGH, HIGH_MAX)

HP_PROG = r"""
import mmap, os, random, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
pages = len(m) // 4096
for i in range(pages):            # warm: the whole working set in the cache, charged to this cgroup
    m[i * 4096]
print("warm", flush=True)
n, t0 = 0, time.monotonic()
rnd = random.Random(1)
while True:
    for _ in range(2000):
        m[rnd.randrange(pages) * 4096]
    n += 2000
    if time.monotonic() - t0 >= 0.5:
        print(n, flush=True)
        n, t0 = 0, time.monotonic()
"""

HOG_PROG = r"""
import sys, time
chunks, limit = [], int(sys.argv[1]) << 20
while sum(map(len, chunks)) < limit:
    chunks.append(bytearray(16 << 20))
    time.sleep(0.02)
print("full", flush=True)
time.sleep(3600)
"""


class Node:
    def __init__(self, h: Hierarchy, node_mib: int) -> None:
        self.h = h
        self.name = f"coloc-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.writer = CgroupWriter(h, self.name)
        for rel in ("burstable/pod-hp", "besteffort/pod-hog"):
            self.writer.mkdir(rel)
        self.writer.set_memory_limit("", node_mib * MI)

    def mem(self, rel: str) -> Path:
        return Path(self.writer.path("memory", rel))

    def spawn(self, rel: str, argv: list[str]) -> subprocess.Popen[str]:
        procs = [Path(d) / "cgroup.procs" for d in {self.writer.path(c, rel) for c in ("cpu", "memory")}]

        def join() -> None:
            for p in procs:
                write_file(p, "0")

        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                preexec_fn=join)  # noqa: PLW1509

    def oom_kills(self, rel: str) -> int:
        path = self.mem(rel) / ("memory.oom_control" if self.h.is_v1("memory") else "memory.events")
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            from agent.daemon.cgroup_tree import remove_tree
            from cgroups.reader import CgroupReader
            remove_tree(self.writer, CgroupReader(self.h, self.name), "")


def majflt(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[9])  # field 12 of the whole line: majflt


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    end = time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    buf = ""
    while time.monotonic() < end:
        chunk = proc.stdout.readline()
        if chunk:
            buf += chunk
            if buf.endswith("\n"):
                return buf.strip()
        elif proc.poll() is not None:
            return ""
        else:
            time.sleep(0.01)
    return ""


def one_case(node: Node, case: str, args: argparse.Namespace, data: Path) -> dict[str, Any]:
    executor = TierMemoryExecutor(node.writer, "besteffort")
    executor.apply(tier_memory_cap(args.budget_mib * MI, OFF if case == "alone" else case))
    drop_cache(data)
    hp_ooms0, hog_ooms0, tier_ooms0 = (node.oom_kills(r) for r in ("burstable/pod-hp", "besteffort/pod-hog",
                                                                    "besteffort"))
    hp = node.spawn("burstable/pod-hp", [sys.executable, "-c", HP_PROG, str(data)])
    hog = None
    out: dict[str, Any] = {"case": case}
    try:
        if read_line(hp, 60) != "warm":
            raise RuntimeError("the HP service did not warm up")
        f0 = majflt(hp.pid)
        if case != "alone":
            hog = node.spawn("besteffort/pod-hog", [sys.executable, "-c", HOG_PROG, str(args.hog_mib)])
        rates: list[int] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end and hp.poll() is None:
            line = read_line(hp, 2)
            if line.isdigit():
                rates.append(int(line) * 2)
        out["hp_alive"] = hp.poll() is None
        out["hp_pages_per_s"] = statistics.median(rates) if rates else 0.0
        out["hp_major_faults"] = majflt(hp.pid) - f0 if hp.poll() is None else -1
        if hog is not None and hog.poll() is None:
            # The window can end before the hog has grown past the cap (a slow start on a busy machine):
            # its fate is read once it is full or dead, so that the kill count does not depend on the window.
            read_line(hog, 30)
            hog.poll()
        out["hp_oom_kills"] = node.oom_kills("burstable/pod-hp") - hp_ooms0 + (0 if out["hp_alive"] else 1)
        out["hog_killed"] = hog is not None and hog.poll() is not None
        out["hog_oom_kills_in_tier"] = (node.oom_kills("besteffort") - tier_ooms0
                                        + node.oom_kills("besteffort/pod-hog") - hog_ooms0)
    finally:
        for p in (hp, hog):
            if p is not None and p.poll() is None:
                p.kill()
            if p is not None:
                p.wait()
        executor.apply(tier_memory_cap(None, OFF))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--node-mib", type=int, default=1536)
    p.add_argument("--hp-file-mib", type=int, default=640)
    p.add_argument("--hog-mib", type=int, default=1200)
    p.add_argument("--budget-mib", type=int, default=512)
    p.add_argument("--quick", action="store_true", help="CI: 1 round, 3 s per case")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 3.0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    node = Node(discover(), args.node_mib)
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        data = Path(tmp) / "hp.dat"
        with data.open("wb") as f:
            for _ in range(args.hp_file_mib):
                f.write(os.urandom(MI))
        try:
            for r in range(args.rounds):
                for case in CASES if r % 2 == 0 else tuple(reversed(CASES)):
                    res = one_case(node, case, args, data)
                    results[case].append(res)
                    print(f"round {r} {json.dumps(res)}", flush=True)
        finally:
            node.cleanup()
    alone = statistics.median(x["hp_pages_per_s"] for x in results["alone"]) or 1.0
    out: dict[str, Any] = {"cgroup_mode": node.h.mode, "budget_mib": args.budget_mib, "hog_mib": args.hog_mib,
                           "node_mib": args.node_mib, "rounds": args.rounds}
    print(f"{'case':<10} {'HP pages/s':>12} {'ratio':>7} {'majflt':>9} {'HP OOM':>7} {'hog OOM in tier':>16}")
    for case, rs in results.items():
        key = case.replace("+", "_")
        rate = statistics.median(x["hp_pages_per_s"] for x in rs)
        faults = statistics.median(x["hp_major_faults"] for x in rs)
        ooms = sum(x["hp_oom_kills"] for x in rs)
        hog = sum(x["hog_oom_kills_in_tier"] for x in rs)
        print(f"{case:<10} {rate:>12.0f} {rate / alone:>7.3f} {faults:>9.0f} {ooms:>7} {hog:>16}")
        out[f"{key}_hp_pages_per_s"] = round(rate, 1)
        out[f"{key}_hp_throughput_ratio"] = round(rate / alone, 3)
        out[f"{key}_hp_major_faults"] = faults
        out[f"{key}_hp_oom_kills"] = ooms
        out[f"{key}_hog_oom_kills_in_tier"] = hog
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
