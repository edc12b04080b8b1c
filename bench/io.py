"""Disk IO: HP commit and read latency beside a BE disk flood, with and without a static cap on BE.

On a private cgroup root (`kit.realcg.RealRoot`: every v1 hierarchy including `blkio`, or the v2 tree with
`io` handed down), with its files in a directory of its own on a real disk (`--dir`, default
`/var/tmp/coloc-bench-io-<pid>`, removed at the end):

- **HP** (cgroup `hp`), two processes: a commit loop (append 4 KiB to a fresh log and `fsync` it, every
  `--commit-ms` 5 ms: a small database's commit; the latency is write + fsync) and a reader (a 4 KiB
  O_DIRECT `pread` at a random offset of a pre-written file every `--read-ms` 1 ms). Both are paced: an op
  that ends late starts the next at once, never a burst to catch up; ops/s fall when ops stall.
- **BE** (cgroup `be`, memory limit `--be-memory-mib`, as a pod's), one of three floods, a `dd` after
  another over a bounded file (chunks of 64 MiB at rotating offsets: the disk sees a flood, the file stays
  small): `direct_write` (`dd bs=1M oflag=direct`), `buffered_write` (`dd bs=1M`, rewriting a file twice
  BE's memory limit, so its dirty pages are written back while it runs, by the kernel's flusher threads),
  `direct_read` (`dd bs=1M iflag=direct` of a pre-written file).
- **Cases**, interleaved over `--rounds` (forward, then reversed): `alone` (HP, no BE); per flood: HP beside
  it uncapped (`<flood>`), and with BE capped (`<flood>_capped`: `--cap-mb` MB/s read and write on the disk
  behind `--dir`, set through `CgroupWriter.set_io_limit`: v1 `blkio.throttle.*_bps_device`, v2 `io.max`);
  and BE alone uncapped and capped (`be_alone_<flood>[_capped]`: what the cap costs BE when HP is idle).
  BE starts `--warmup` s before HP's `--seconds` s window.

Per case, from the samples of every round pooled: HP commit (write + fsync) and read latency p50/p99/max (ms)
and ops/s; BE MB/s (MB = 10^6 B) as `dd` moved it (`/proc/<pid>/io`), as BE's cgroup was charged for it
(v1 `blkio.throttle.io_service_bytes_recursive`, v2 `io.stat`), and the whole disk's MB/s over the window
(`/sys/dev/block/MAJ:MIN/stat`, everything on the disk, not only the bench). Last line: one JSON object.

    sudo python3 bench/io.py [--rounds 6] [--seconds 6] [--cap-mb 20] [--dir DIR]   # ~12 min
    sudo python3 bench/io.py --quick                                                 # < 40 s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.bench import drop_cache, finish, pct, progress
from kit.realcg import CgroupsUnavailable, RealRoot

from cgroups.io import NO_LIMIT, IoLimit, IoStat, disk_of, parse_blkio, parse_io_stat

MI = 1 << 20
MB = 1_000_000
FLOODS = ("direct_write", "buffered_write", "direct_read")
HP_CASES = ("alone", *FLOODS, *(f"{f}_capped" for f in FLOODS))
BE_CASES = tuple(f"be_alone_{f}{c}" for f in FLOODS for c in ("", "_capped"))
CASES = HP_CASES + BE_CASES
REQUIRED = ("alone_fsync_p99_ms", *(f"{f}{c}_fsync_p99_ms" for f in FLOODS for c in ("", "_capped")),
            *(f"be_alone_{f}{c}_mb_per_s" for f in FLOODS for c in ("", "_capped")))

# One HP load: `fsync` (append 4 KiB, fsync) or `read` (4 KiB O_DIRECT pread at a random 4 KiB offset), one op
# every `interval` s from `start` to `end` (time.monotonic, which is CLOCK_MONOTONIC: one clock for all
# processes); prints {"lat_ms": [...], "span_s": ...} when done.
HP_PROG = r"""
import json, mmap, os, random, sys, time
kind, path = sys.argv[1], sys.argv[2]
start, end, interval = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
buf.write(os.urandom(4096))
if kind == "fsync":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    def op():
        os.write(fd, buf)
        os.fsync(fd)
else:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    blocks, rnd = os.fstat(fd).st_size // 4096, random.Random(os.getpid())
    def op():
        os.preadv(fd, [buf], rnd.randrange(blocks) * 4096)
lat = []
now = time.monotonic()
if now < start:
    time.sleep(start - now)
begin = nxt = time.monotonic()
while True:
    now = time.monotonic()
    if now >= end:
        break
    if now < nxt:
        time.sleep(min(nxt, end) - now)
        continue
    op()
    done = time.monotonic()
    lat.append(round((done - now) * 1000, 4))
    nxt = max(nxt + interval, done)
os.close(fd)
print(json.dumps({"lat_ms": lat, "span_s": max(end - begin, 1e-3)}))
"""


@dataclass
class Sample:
    """What one case measured in one round."""

    fsync_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    fsync_ops_per_s: float = 0.0
    read_ops_per_s: float = 0.0
    be_mb_per_s: float = 0.0
    be_cgroup_mb_per_s: float = 0.0
    disk_mb_per_s: float = 0.0


class Flood:
    """A BE flood: one `dd` of `chunk_mib` after another in cgroup `rel`, at rotating offsets of `path`
    (`file_mib` long); `moved()` is the bytes `dd` has read (read flood) or written so far."""

    def __init__(self, root: RealRoot, rel: str, kind: str, path: Path, file_mib: int,
                 chunk_mib: int) -> None:
        self.root, self.rel, self.kind, self.path = root, rel, kind, path
        self.chunk, self.slots = chunk_mib, max(1, file_mib // chunk_mib)
        self.done = 0  # bytes of the dd runs that finished
        self.n = 0
        self.proc: subprocess.Popen[Any] | None = None
        self.key = "rchar" if kind == "direct_read" else "wchar"

    def _argv(self) -> list[str]:
        at = (self.n % self.slots) * self.chunk
        common = ["bs=1M", f"count={self.chunk}", "status=none"]
        if self.kind == "direct_read":
            return ["dd", f"if={self.path}", "of=/dev/null", f"skip={at}", "iflag=direct", *common]
        direct = ["oflag=direct"] if self.kind == "direct_write" else []
        return ["dd", "if=/dev/zero", f"of={self.path}", f"seek={at}", "conv=notrunc", *direct, *common]

    def _spawn(self) -> None:
        self.proc = self.root.spawn(self.rel, self._argv(), stderr=subprocess.PIPE)
        self.n += 1

    def _reap(self) -> None:
        """The running dd, if it ended: counted (a whole chunk), forgotten, and the next one started."""
        p = self.proc
        if p is None or p.poll() is None:
            return
        err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
        if p.stderr:
            p.stderr.close()
        with contextlib.suppress(ValueError):
            self.root.procs.remove(p)
        if p.returncode != 0:
            raise RuntimeError(f"BE dd ({self.kind}) exited {p.returncode}: {err[:300]}")
        self.done += self.chunk * MI
        self._spawn()

    def start(self) -> None:
        self._spawn()

    def tend(self) -> None:
        self._reap()

    def moved(self) -> int:
        self._reap()
        p = self.proc
        assert p is not None
        partial = 0
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{p.pid}/io").read_text().splitlines():
                k, _, v = line.partition(":")
                if k == self.key:
                    partial = int(v)
        if p.poll() is not None:  # ended while we read: a whole chunk, counted by the next _reap
            self._reap()
            return self.done
        return self.done + min(partial, self.chunk * MI)

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            p.wait()
            if p.stderr:
                p.stderr.close()
            with contextlib.suppress(ValueError):
                self.root.procs.remove(p)
        self.proc = None


class Bench:
    def __init__(self, args: argparse.Namespace, root: RealRoot, workdir: Path, dev: str) -> None:
        self.args, self.root, self.dir, self.dev = args, root, workdir, dev
        self.v1 = root.hierarchy.is_v1("blkio")
        self.writer, _ = root.writer_reader()
        self.hp = root.mkcg("hp")
        self.be = root.mkcg("be")
        self.writer.set_memory_limit(self.be, args.be_memory_mib * MI)
        self.hp_file = workdir / "hp-read.dat"
        self.write_file = workdir / "be-write.dat"
        self.read_file = workdir / "be-read.dat"
        self.cap = IoLimit(rbps=int(args.cap_mb * MB), wbps=int(args.cap_mb * MB))

    # -- files ---------------------------------------------------------------------------------------

    def prepare(self) -> None:
        block = os.urandom(MI)
        for path, mib in ((self.hp_file, self.args.hp_file_mib), (self.write_file, self.args.write_file_mib),
                          (self.read_file, self.args.read_file_mib)):
            with path.open("wb") as f:
                for _ in range(mib):
                    f.write(block)
            drop_cache(path)

    # -- counters ------------------------------------------------------------------------------------

    def be_charged(self) -> int:
        """Bytes BE's cgroup was charged for on the disk, read and written."""
        d = self.root.path("blkio" if self.v1 else "unified", self.be)
        if self.v1:
            stats = parse_blkio((d / "blkio.throttle.io_service_bytes_recursive").read_bytes(),
                                (d / "blkio.throttle.io_serviced_recursive").read_bytes())
        else:
            stats = parse_io_stat((d / "io.stat").read_bytes())
        s = stats.get(self.dev, IoStat())
        return s.rbytes + s.wbytes

    def disk_bytes(self) -> int:
        fields = Path(f"/sys/dev/block/{self.dev}/stat").read_text().split()
        return (int(fields[2]) + int(fields[6])) * 512

    def counters(self, flood: Flood | None) -> tuple[float, int, int, int]:
        return time.monotonic(), flood.moved() if flood else 0, self.be_charged(), self.disk_bytes()

    # -- one case ------------------------------------------------------------------------------------

    def run_case(self, case: str, tag: str) -> Sample:
        a = self.args
        flood_kind = next((f for f in FLOODS if f in case), None)
        with_hp = not case.startswith("be_alone")
        self.writer.set_io_limit(self.be, self.dev, self.cap if case.endswith("_capped") else NO_LIMIT)
        log = self.dir / f"hp-log-{tag}"
        t_be = time.monotonic() + 0.3  # room for the HP processes to start
        start = t_be + (a.warmup if flood_kind else 0.0)
        end = start + a.seconds
        hp: dict[str, subprocess.Popen[Any]] = {}
        flood = None
        if flood_kind:
            target = self.read_file if flood_kind == "direct_read" else self.write_file
            mib = a.read_file_mib if flood_kind == "direct_read" else a.write_file_mib
            flood = Flood(self.root, self.be, flood_kind, target, mib, min(a.chunk_mib, mib))
        try:
            if with_hp:
                for kind, path, every in (("fsync", log, a.commit_ms), ("read", self.hp_file, a.read_ms)):
                    hp[kind] = self.root.spawn(self.hp, [sys.executable, "-c", HP_PROG, kind, str(path),
                                                         repr(start), repr(end), repr(every / 1000)],
                                               stdout=subprocess.PIPE)
            sleep_until(t_be)
            if flood:
                flood.start()
            c0 = self.watch_until(start, flood)
            c1 = self.watch_until(end, flood)
            out = Sample()
            dt = c1[0] - c0[0]
            out.be_mb_per_s = (c1[1] - c0[1]) / dt / MB
            out.be_cgroup_mb_per_s = (c1[2] - c0[2]) / dt / MB
            out.disk_mb_per_s = (c1[3] - c0[3]) / dt / MB
            for kind, proc in hp.items():
                stdout, _ = proc.communicate(timeout=a.seconds + 60)
                self.root.procs.remove(proc)
                if proc.returncode != 0:
                    raise RuntimeError(f"HP {kind} exited {proc.returncode}")
                got = json.loads(stdout)
                setattr(out, f"{kind}_ms", got["lat_ms"])
                setattr(out, f"{kind}_ops_per_s", len(got["lat_ms"]) / got["span_s"])
            return out
        finally:
            if flood:
                flood.stop()
            for proc in hp.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            log.unlink(missing_ok=True)
            if flood_kind == "buffered_write":
                drop_cache(self.write_file)  # its dirty pages written now, not in the next case

    def watch_until(self, when: float, flood: Flood | None) -> tuple[float, int, int, int]:
        """Keep the flood going until `when`, then the counters."""
        while (left := when - time.monotonic()) > 0:
            if flood:
                flood.tend()
            time.sleep(min(left, 0.005))
        return self.counters(flood)


def sleep_until(when: float) -> None:
    left = when - time.monotonic()
    if left > 0:
        time.sleep(left)


def summarise(results: dict[str, list[Sample]], args: argparse.Namespace, dev: str,
              mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {"cgroup_mode": mode, "device": dev, "cap_mb_per_s": args.cap_mb,
                           "rounds": args.rounds, "seconds_per_case": args.seconds,
                           "be_memory_mib": args.be_memory_mib}
    for case, rs in results.items():
        if not case.startswith("be_alone"):
            for kind in ("fsync", "read"):
                pooled = [x for r in rs for x in getattr(r, f"{kind}_ms")]
                out[f"{case}_{kind}_p50_ms"] = round(pct(pooled, 50), 3)
                out[f"{case}_{kind}_p99_ms"] = round(pct(pooled, 99), 3)
                out[f"{case}_{kind}_max_ms"] = round(max(pooled, default=float("nan")), 3)
                out[f"{case}_{kind}_ops_per_s"] = round(statistics.median(getattr(r, f"{kind}_ops_per_s")
                                                                          for r in rs), 1)
        if case != "alone":
            for key in ("be_mb_per_s", "be_cgroup_mb_per_s", "disk_mb_per_s"):
                name = key.removeprefix("be_") if case.startswith("be_alone") and key != "disk_mb_per_s" \
                    else key
                out[f"{case}_{name}"] = round(statistics.median(getattr(r, key) for r in rs), 1)
    for case in HP_CASES[1:]:
        for kind in ("fsync", "read"):
            out[f"{case}_{kind}_p99_over_alone_ratio"] = round(
                out[f"{case}_{kind}_p99_ms"] / max(out[f"alone_{kind}_p99_ms"], 1e-3), 2)
    return out


def table(results: dict[str, list[Sample]], out: dict[str, Any]) -> None:
    print(f"{'case':<24} {'commit p50/p99/max ms':>24} {'p99 range':>15} {'read p50/p99/max ms':>22} "
          f"{'commit/s':>8} {'read/s':>7} {'BE MB/s':>8} {'charged':>8} {'disk':>7}")
    for case, rs in results.items():
        if case.startswith("be_alone"):
            hp = " " * 90
        else:
            p99s = [pct(r.fsync_ms, 99) for r in rs]
            hp = (f"{out[f'{case}_fsync_p50_ms']:>7.2f}/{out[f'{case}_fsync_p99_ms']:>7.2f}/"
                  f"{out[f'{case}_fsync_max_ms']:>8.1f} {min(p99s):>7.1f}-{max(p99s):<7.1f}"
                  f"{out[f'{case}_read_p50_ms']:>6.2f}/{out[f'{case}_read_p99_ms']:>6.2f}/"
                  f"{out[f'{case}_read_max_ms']:>8.1f} {out[f'{case}_fsync_ops_per_s']:>8.0f} "
                  f"{out[f'{case}_read_ops_per_s']:>7.0f}")
        be = ""
        if case != "alone":
            pre = "" if case.startswith("be_alone") else "be_"
            be = (f"{out[f'{case}_{pre}mb_per_s']:>8.1f} {out[f'{case}_{pre}cgroup_mb_per_s']:>8.1f} "
                  f"{out[f'{case}_disk_mb_per_s']:>7.1f}")
        print(f"{case:<24} {hp} {be}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI: 1 round, 1 s per case, small files (< 40 s)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=6.0, help="HP's measured window per case")
    p.add_argument("--warmup", type=float, default=1.0, help="BE runs this long before HP's window")
    p.add_argument("--cap-mb", type=float, default=20.0, help="BE's read and write cap, MB/s (10^6 B)")
    p.add_argument("--commit-ms", type=float, default=5.0)
    p.add_argument("--read-ms", type=float, default=1.0)
    p.add_argument("--hp-file-mib", type=int, default=64)
    p.add_argument("--write-file-mib", type=int, default=128, help="BE's write target (2× its memory)")
    p.add_argument("--read-file-mib", type=int, default=256)
    p.add_argument("--chunk-mib", type=int, default=64, help="MiB per dd run")
    p.add_argument("--be-memory-mib", type=int, default=64)
    p.add_argument("--dir", type=Path, default=None, help="where the files go (a real disk, not tmpfs)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup = 1, 1.0, 0.3
        args.hp_file_mib, args.write_file_mib, args.read_file_mib, args.chunk_mib = 16, 48, 32, 8
        args.be_memory_mib = 24
    if shutil.which("dd") is None:
        print("bench/io.py: `dd` is not installed (Debian package coreutils)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    workdir = args.dir or Path(f"/var/tmp/coloc-bench-io-{os.getpid()}")
    workdir.mkdir(parents=True)
    try:
        dev = disk_of(os.stat(workdir).st_dev)
        if dev is None:
            print(f"bench/io.py: {workdir} is not on a disk (tmpfs, overlay, loop, dm?): pass --dir on one",
                  file=sys.stderr)
            return 2
        try:
            root = RealRoot(prefix="coloc-bench-io")
        except CgroupsUnavailable as err:
            print(f"bench/io.py: {err}", file=sys.stderr)
            return 2
        try:
            with_blkio(root)
            return measure(args, root, workdir, dev)
        finally:
            root.cleanup()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def with_blkio(root: RealRoot) -> None:
    """On v1, the root in the `blkio` hierarchy too, when the kit's list of controllers leaves it out: the
    cgroups made, joined and removed there like in every other hierarchy."""
    h = root.hierarchy
    if h.is_v1("blkio") and "blkio" not in root.mounts:
        root.mounts["blkio"] = h.v1["blkio"]
        (h.v1["blkio"] / root.name).mkdir()


def measure(args: argparse.Namespace, root: RealRoot, workdir: Path, dev: str) -> int:
    if not (root.hierarchy.is_v1("blkio") or root.hierarchy.mode == "v2"):
        print("bench/io.py: no blkio (v1) or io (v2) controller here", file=sys.stderr)
        return 2
    bench = Bench(args, root, workdir, dev)
    progress(f"disk {dev}, {workdir}, cgroups {root.hierarchy.mode}; writing the files")
    bench.prepare()
    results: dict[str, list[Sample]] = {c: [] for c in CASES}
    for r in range(args.rounds):
        for case in CASES if r % 2 == 0 else tuple(reversed(CASES)):
            s = bench.run_case(case, f"{r}-{case}")
            results[case].append(s)
            hp = (f"commit p99 {pct(s.fsync_ms, 99):.2f} ms, read p99 {pct(s.read_ms, 99):.2f} ms, "
                  if s.fsync_ms else "")
            progress(f"round {r} {case}: {hp}BE {s.be_mb_per_s:.1f} MB/s (charged "
                     f"{s.be_cgroup_mb_per_s:.1f}), disk {s.disk_mb_per_s:.1f} MB/s")
    out = summarise(results, args, dev, root.hierarchy.mode)
    table(results, out)
    out["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return finish("bench/io.py", out, REQUIRED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
