"""Cost of one full collection (CgroupReader.sample() of every cgroup) against the raw-read floor.

For N = 100, 500 and 1000 real cgroups under a private root (`coloc-bench-<uuid>`, a sleeping
process in every 20th), in the same run and interleaved:

  collect  reader.sample(rel) for every cgroup (kept fds, pread, parse, build CgroupSample)
  floor    os.pread of exactly the files sample() reads, on already-open fds, same sizes, no parsing

both for the default reader (7 files per cgroup on a hybrid host: CPU, throttling, memory, limit,
cpu and memory pressure) and for a reader built with psi=False (5 files).

Prints the medians, the ratio collect/floor and ms per 1000 cgroups; the last line is one JSON
object. Needs root and writable cgroups. Everything it creates is removed, also on failure.

    python3 bench/collect.py [--repeat 21] [--sizes 100,500,1000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

from kit.bench import finish, require_tools

from cgroups.discovery import Hierarchy, discover
from cgroups.reader import CgroupReader, read_size
from cgroups.writer import CgroupWriter

# The agent's default reader (with PSI) and the one for the many BE cgroups (psi=False).
CONFIGS = (("psi", True), ("no_psi", False))
TARGET_RATIO = 2.0
TARGET_MS_PER_1000 = 25.0


def rel_of(i: int) -> str:
    return f"tier{i % 3}/pod{i:05d}"


def time_collect(reader: CgroupReader, rels: list[str]) -> float:
    sample = reader.sample
    t0 = time.perf_counter()
    for rel in rels:
        sample(rel)
    return time.perf_counter() - t0


def time_floor(plan: list[tuple[int, int]]) -> float:
    pread = os.pread
    t0 = time.perf_counter()
    for fd, size in plan:
        pread(fd, size, 0)
    return time.perf_counter() - t0


def measure(hierarchy: Hierarchy, root: str, rels: list[str], psi: bool, repeat: int) -> dict[str, float]:
    """Median collection and floor times over `repeat` interleaved rounds."""
    with CgroupReader(hierarchy, root, psi=psi) as reader:
        for rel in rels:  # open the descriptors once, as the agent does on its first tick
            reader.sample(rel)
        files = [f for rel in rels for f in reader.files(rel)]
        fds = [os.open(f, os.O_RDONLY | os.O_CLOEXEC) for f in files]
        try:
            plan = [(fd, read_size(f)) for fd, f in zip(fds, files, strict=True)]
            collect, floor = [], []
            for _ in range(repeat):
                collect.append(time_collect(reader, rels))
                floor.append(time_floor(plan))
        finally:
            for fd in fds:
                os.close(fd)
    c_ms, f_ms = statistics.median(collect) * 1e3, statistics.median(floor) * 1e3
    n = len(rels)
    return {
        "collect_ms": round(c_ms, 3),
        "floor_ms": round(f_ms, 3),
        "ratio": round(c_ms / f_ms, 3),
        "collect_ms_per_1000": round(c_ms * 1000 / n, 3),
        "floor_ms_per_1000": round(f_ms * 1000 / n, 3),
        "files_per_cgroup": len(files) / n,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--sizes", default="100,500,1000")
    ap.add_argument("--quick", action="store_true", help="smoke run for CI: 50 and 100 cgroups, 3 rounds")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.sizes = 3, "50,100"
    sizes = [int(x) for x in args.sizes.split(",")]
    require_tools("bench/collect.py", ("sleep",))  # the processes in some cgroups

    hierarchy = discover()
    root = f"coloc-bench-{uuid.uuid4().hex[:12]}"
    writer = CgroupWriter(hierarchy, root, controllers=("cpu", "cpuacct", "memory", "pids"))
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, dict[str, dict[str, float]]] = {config: {} for config, _ in CONFIGS}
    try:
        writer.mkdir("")
        made = 0
        for n in sizes:
            for i in range(made, n):
                rel = rel_of(i)
                writer.mkdir(rel)
                if i % 20 == 0:
                    p = subprocess.Popen(["sleep", "3600"])
                    procs.append(p)
                    writer.move_pid(rel, p.pid)
            made = max(made, n)
            rels = [rel_of(i) for i in range(n)]
            for config, psi in CONFIGS:
                r = results[config][str(n)] = measure(hierarchy, root, rels, psi, args.repeat)
                print(
                    f"N={n:5d} {config:6s} files/cgroup={r['files_per_cgroup']:.0f}  "
                    f"collect median {r['collect_ms']:8.3f} ms   floor median {r['floor_ms']:8.3f} ms   "
                    f"ratio {r['ratio']:5.2f}   {r['collect_ms_per_1000']:6.2f} ms per 1000 cgroups "
                    f"(floor {r['floor_ms_per_1000']:6.2f})",
                    flush=True,
                )
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        writer.rmdir("", recursive=True)
    summary: dict[str, object] = {"bench": "collect", "mode": hierarchy.mode, "repeat": args.repeat}
    for config, _ in CONFIGS:
        mine = list(results[config].values())
        worst_ratio = max(r["ratio"] for r in mine)
        worst_per_1000 = max(r["collect_ms_per_1000"] for r in mine)
        ok = worst_ratio <= TARGET_RATIO and worst_per_1000 <= TARGET_MS_PER_1000
        print(
            f"{config}: ratio <= {TARGET_RATIO} (worst {worst_ratio:.2f}), <= {TARGET_MS_PER_1000} ms per "
            f"1000 cgroups (worst {worst_per_1000:.2f}): {'met' if ok else 'NOT met'}"
        )
        summary[f"{config}_worst_ratio"] = worst_ratio
        summary[f"{config}_worst_collect_ms_per_1000"] = worst_per_1000
        summary[f"{config}_targets_met"] = ok
    summary["results"] = results
    return finish("bench/collect.py", summary, ("psi_worst_ratio", "no_psi_worst_collect_ms_per_1000"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
