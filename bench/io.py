"""Disk IO: HP commit and read latency beside a BE disk flood, with no agent and with the agent's disk guard.

On a private cgroup root (`kit.realcg.RealRoot`: every v1 hierarchy including `blkio`, or the v2 tree with
`io` handed down), laid out as the agent's standalone source finds a node (`<root>/node`: HP a direct child,
BE below `besteffort/`), with its files in a directory of its own on a real disk (`--dir`, default
`/var/tmp/coloc-bench-io-<pid>`, removed at the end):

- **HP** (cgroup `node/hp`), two processes: a commit loop (append 4 KiB to a fresh log and `fsync` it, every
  `--commit-ms` 5 ms: a small database's commit; the latency is write + fsync) and a reader (a 4 KiB
  O_DIRECT `pread` at a random offset of a pre-written file every `--read-ms` 1 ms). Both are paced: an op
  that ends late starts the next at once, never a burst to catch up; ops/s fall when ops stall. They are
  started first and wait for their window (their start-up's IO is not HP's load).
- **BE** (cgroup `node/besteffort/be`, a pod's; `--be-in-tier`: the tier itself; memory limit
  `--be-memory-mib`), one of three floods, a `dd` after another over a bounded file (chunks of 64 MiB at
  rotating offsets: the disk sees a flood, the file stays small): `direct_write` (`dd bs=1M oflag=direct`),
  `buffered_write` (`dd bs=1M`, rewriting a file twice BE's memory limit, so its dirty pages are written back
  while it runs), `direct_read` (`dd bs=1M iflag=direct` of a pre-written file); on request (`--floods`)
  `small_read` (the same file in 4 KiB direct reads: a flood of small requests, where the IO/s floor binds).
- **The agent** (`<flood>_agent` cases): a real `coloc-agent run` (this checkout's, or `--agent-tree`'s),
  standalone on `<root>/node`, guarding the disk behind `--dir` with the shipped policy (config `io: {devices:
  [dev]}`, nothing else of `io:`), 1 s ticks; started for the case (before BE's warm-up; the case starts once
  it ticks and its guard reports), stopped with SIGTERM after it; a clean exit must leave BE uncapped (else
  the bench fails). The bench reads BE's cap (the tier's, and BE's own cgroup's: v1's throttle is flat, the
  guard spreads the cap there) every ~10 ms: the **cut** is from HP's first op to the first cap seen, the
  **lift** from HP's last op to no cap (BE goes on flooding `--lift-wait` s after HP stops).
- **Cases**, interleaved over `--rounds` (forward, then reversed): `alone` (HP, no BE); per flood: HP beside
  it with no agent (`<flood>`), with the agent (`<flood>_agent`); BE alone with no agent and with the agent
  (`be_alone_<flood>[_agent]`: what the guard costs BE when HP is idle). With `--capped`, also a static cap
  on BE's cgroup (`<flood>_capped`, `be_alone_<flood>_capped`: `--cap-mb` MB/s read and write, through
  `CgroupWriter.set_io_limit`: v1 `blkio.throttle.*_bps_device`, v2 `io.max`). BE starts `--warmup` s before
  HP's `--seconds` s window. `--variant NAME:SPEC` adds a kind of case (`<flood>_NAME`): the agent with other
  io.policy settings, or no agent under another scheduler; BE-alone cases only where HP's absence can differ.
- **Where**: the disk behind `--dir`; with `--loop-mib`, a contained disk instead (a loop device with direct
  IO over a file there, ext4 on it, made and removed by the bench: `kit.loopdisk`), whose scheduler a variant
  may switch (`sched=bfq`, BFQ weights, `iosched.*` tunables) while the machine's disk stays as it is. With
  `--hp-rt`, HP's processes run SCHED_FIFO: on a machine whose CPUs other work keeps busy HP's latency is
  otherwise the wait for a CPU as much as the disk's.

Per case, from the samples of every round pooled: HP commit (write + fsync) and read latency p50/p99/max (ms)
and ops/s (commits + reads, and its ratio to HP alone per round, then the median); BE MB/s (MB = 10^6 B) as
`dd` moved it (`/proc/<pid>/io`), as BE's cgroup was charged for it (v1 `blkio.throttle.io_service_bytes_
recursive`, v2 `io.stat`), and the whole disk's MB/s over the window (`/sys/dev/block/MAJ:MIN/stat`,
everything on the disk, not only the bench); with the agent, the share of the window BE was capped, the cut
and the lift (medians over rounds), and the issue's targets (`<flood>_agent_target_met`: p99 <= 2x alone and
ops >= 0.9 of alone; `be_alone_<flood>_agent_target_met`: >= 0.8 of BE alone; `io_reaction_target_met`: cut
and lift medians <= 1 s). Last line: one JSON object.

    sudo python3 bench/io.py [--rounds 6] [--seconds 6] [--capped] [--dir DIR]   # ~11 min (8 rounds: 15)
    sudo python3 bench/io.py --quick                                              # < 40 s
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
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kit.agentproc import agent_argv, agent_config, samples, stop
from kit.bench import drop_cache, finish, pct, progress
from kit.diskio import be_cap
from kit.loopdisk import LoopDisk, LoopUnavailable, loop_disk
from kit.ports import free_port
from kit.realcg import CgroupsUnavailable, RealRoot

from cgroups.io import NO_LIMIT, IoLimit, IoStat, disk_of, parse_blkio, parse_io_stat
from cgroups.io_meter import IoMeter

MI = 1 << 20
MB = 1_000_000
DEFAULT_FLOODS = ("direct_write", "buffered_write", "direct_read")
ALL_FLOODS = (*DEFAULT_FLOODS, "small_read")  # small_read: 4 KiB direct reads, one after another
FLOODS = list(DEFAULT_FLOODS)  # this run's: --floods sets it in place; every case list and summary reads it
SUB = "node"  # the agent's cgroup root, below the bench's private root
HP_REL, TIER = f"{SUB}/hp", f"{SUB}/besteffort"  # HP a direct child of the agent's root; BE below besteffort/
BE_REL = f"{TIER}/be"
NO_CAP = (None, None, None, None)
SETTLE_S = 1.0  # HP's "settled" figures leave out its window's first second (with the agent: before the cut)
REPO = Path(__file__).resolve().parents[1]
# The targets with the agent (issue #32): HP p99 <= 2x alone, HP ops >= 0.9 of alone, BE alone with
# the agent >= 0.8 of BE alone without it, the cap set and lifted within 1 s of HP's start and stop.
TARGET_P99_RATIO, TARGET_OPS_RATIO, TARGET_BE_SHARE, TARGET_REACTION_S = 2.0, 0.9, 0.8, 1.0


@dataclass(frozen=True)
class Variant:
    """A case kind beyond the three built in (no agent, `_agent`, `_capped`), from `--variant NAME:SPEC`: with
    or without the agent, the agent's io.policy settings, and (on a loop disk, `--loop-mib`) the loop
    device's scheduler for the case and, under BFQ, the cgroups' `blkio.bfq.weight` (v1) / `io.bfq.weight`
    (v2): HP `hp_weight`, the BE tier and BE `be_weight`."""

    name: str
    agent: bool = True
    policy: dict[str, float] = field(default_factory=dict)
    io: dict[str, Any] = field(default_factory=dict)  # io: settings other than the policy (io.KEY=VALUE)
    sched: str | None = None
    iosched: dict[str, str] = field(default_factory=dict)  # the scheduler's tunables (iosched.KEY=VALUE)
    hp_weight: int = 1000
    be_weight: int = 1
    hp_latency_us: int = 0  # v2: HP's `io.latency` target on the disk for the case (0: none)
    iocost: bool = False  # v2: blk-iocost on the disk (the root's `io.cost.qos`) and `io.weight` HP/BE

    @property
    def suffix(self) -> str:
        return f"_{self.name}"


VARIANTS: dict[str, Variant] = {}  # this run's, by suffix (--variant)


def parse_variant(text: str) -> Variant:
    """`NAME:KEY=VALUE,...`: `agent=0|1`, `sched=NAME`, `iosched.KEY=VALUE` (a tunable of the loop disk's
    scheduler, /sys/block/loopN/queue/iosched/KEY), `hp_weight=N`, `be_weight=N`, `io.KEY=VALUE` (an
    io: setting of the agent's), `hp_latency_us=N` (v2: HP's `io.latency` target), `iocost=1` (v2: blk-iocost
    on the disk, `io.weight` HP `hp_weight` and BE `be_weight`, 1-10000), any other KEY an io.policy setting
    (a number). ValueError naming what is wrong."""
    name, _, spec = text.partition(":")
    if not name.isidentifier() or name in ("agent", "capped"):
        raise ValueError(f"--variant {text!r}: NAME must be a word other than agent and capped")
    v = Variant(name)
    for kv in (x for x in spec.split(",") if x):
        key, eq, value = kv.partition("=")
        if not eq:
            raise ValueError(f"--variant {text!r}: {kv!r} is not KEY=VALUE")
        if key == "agent":
            v = replace(v, agent=value not in ("0", "false", "no"))
        elif key == "sched":
            v = replace(v, sched=value)
        elif key == "hp_weight":
            v = replace(v, hp_weight=int(value))
        elif key == "be_weight":
            v = replace(v, be_weight=int(value))
        elif key == "hp_latency_us":
            v = replace(v, hp_latency_us=int(value))
        elif key == "iocost":
            v = replace(v, iocost=value not in ("0", "false", "no"))
        elif key.startswith("iosched."):
            v.iosched[key.removeprefix("iosched.")] = value
        elif key.startswith("io."):
            v.io[key.removeprefix("io.")] = value
        else:
            v.policy[key] = float(value)
    return v


def kinds(capped: bool) -> tuple[str, ...]:
    return ("", "_agent", *(("_capped",) if capped else ()), *VARIANTS)


def with_agent(case: str) -> bool:
    """Whether a case runs the agent: `_agent` and the variants with it."""
    v = VARIANTS.get(variant_suffix(case))
    return case.endswith("_agent") or (v is not None and v.agent)


def variant_suffix(case: str) -> str:
    return next((k for k in VARIANTS if case.endswith(k)), "")


def case_names(capped: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The HP cases and the BE-alone cases of a run (the static `_capped` ones only with --capped)."""
    ks = kinds(capped)
    return (("alone", *(f"{f}{k}" for f in FLOODS for k in ks)),
            tuple(f"be_alone_{f}{k}" for f in FLOODS for k in ks if be_alone_differs(k)))


def be_alone_differs(kind: str) -> bool:
    """Whether BE alone in this kind of case can differ from BE alone with the agent: a variant that only
    changes the agent's policy changes nothing while HP is idle (no cap), so it has no BE-alone case."""
    v = VARIANTS.get(kind)
    return v is None or not v.agent or bool(v.sched) or bool(v.io) or bool(v.iosched)


def required(capped: bool) -> tuple[str, ...]:
    kinds = ("", "_agent", *(("_capped",) if capped else ()))
    return ("alone_fsync_p99_ms", "alone_read_p99_ms", "alone_ops_per_s",
            *(f"{f}{k}_{x}" for f in FLOODS for k in kinds
              for x in ("fsync_p99_ms", "read_p99_ms", "ops_over_alone_ratio")),
            *(f"be_alone_{f}{k}_mb_per_s" for f in FLOODS for k in kinds),
            *(f"{f}_agent_{x}_over_alone_ratio" for f in FLOODS for x in ("fsync_p99", "read_p99")),
            *(f"be_alone_{f}_agent_over_alone_ratio" for f in FLOODS))


# One HP load: `fsync` (append 4 KiB, fsync) or `read` (4 KiB O_DIRECT pread at a random 4 KiB offset), one op
# every `interval` s from `start` to `end` (time.monotonic, which is CLOCK_MONOTONIC: one clock for all
# processes), the three read from stdin once the process is up and has said "ready" (its start-up's IO done
# before the case's agent and BE start); prints {"lat_ms": [...], "at_s": [...], "span_s": ..., "first": ...,
# "last": ...} when done (`at_s` each op's start from the first's, `first` the first op's start, `last` the
# last op's end).
HP_PROG = r"""
import json, mmap, os, random, sys, time
kind, path = sys.argv[1], sys.argv[2]
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
print("ready", flush=True)
start, end, interval = map(float, sys.stdin.readline().split())
lat, at = [], []
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
    at.append(round(now - begin, 3))
    nxt = max(nxt + interval, done)
os.close(fd)
print(json.dumps({"lat_ms": lat, "at_s": at, "span_s": max(end - begin, 1e-3), "first": begin,
                  "last": done if lat else begin}))
"""


@dataclass
class Sample:
    """What one case measured in one round."""

    fsync_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    fsync_settled_ms: list[float] = field(default_factory=list)  # the ops SETTLE_S or more into the window
    read_settled_ms: list[float] = field(default_factory=list)
    fsync_ops_per_s: float = 0.0
    read_ops_per_s: float = 0.0
    be_mb_per_s: float = 0.0
    be_cgroup_mb_per_s: float = 0.0
    disk_mb_per_s: float = 0.0
    host_disk_mb_per_s: float = 0.0  # the real disk below (--loop-mib: everything on it, the loop's IO too)
    # with the agent: BE's cap file read every ~10 ms
    cut_s: float | None = None  # HP's first op -> the first cap seen (None: none seen while HP ran)
    lift_s: float | None = None  # HP's last op -> no cap (None: no cap at HP's stop, or never lifted)
    capped_share: float | None = None  # share of the polls in the measured window that saw a cap
    capped_before_hp: bool = False  # a cap seen with BE flooding before HP's first op


class Agent:
    """The checkout's `coloc-agent run`, standalone on the bench's cgroup root `<root>/node` (HP its
    direct child `hp`, BE below `besteffort/`), guarding `dev` with the shipped policy (`io: {devices:
    [dev]}`, nothing else of `io:`), 1 s ticks, /metrics on a free port, its state and socket in `tmp`
    (fresh at each start)."""

    def __init__(self, root: RealRoot, dev: str, tmp: Path, tree: Path, be: str,
                 policy: dict[str, float] | None = None) -> None:
        self.root, self.dev, self.tmp, self.tree = root, dev, tmp, tree
        self.policy = policy or {}  # io.policy settings other than the shipped ones (--io-policy)
        self.watched = tuple(dict.fromkeys((TIER, be)))  # where BE's caps show: the tier, BE's own cgroup
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / "agent.log"
        self.port = 0
        self.starts = 0
        self.ready_s: list[float] = []
        # the agent's CPU (all threads) over each run, % of one CPU, by kind of case ("agent" or a variant's)
        self.cpu_percent: dict[str, list[float]] = {}
        self._kind = "agent"
        self._began = 0.0

    def start(self, variant: Variant | None = None) -> None:
        """Start the agent (a variant's io.policy and io: settings over --io-policy's)."""
        shutil.rmtree(self.tmp / "state", ignore_errors=True)
        (self.tmp / "agent.sock").unlink(missing_ok=True)
        self.port = free_port()
        mem_gib = max(1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30)
        cfg = agent_config(self.tmp, f"{self.root.name}/{SUB}", self.port,
                           node={"cpus": os.cpu_count() or 1, "memory": f"{mem_gib}Gi"},
                           loop={"interval_s": 1.0, "fast_path": None},
                           cgroups={"setup_tiers": True, "cleanup_on_exit": False},
                           io=self.io_config(variant))
        began = time.monotonic()
        self._kind = variant.name if variant is not None else "agent"
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(agent_argv("run", "--config", str(cfg)), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=out, cwd=self.tree)
        self.starts += 1
        deadline = began + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the agent exited {self.proc.returncode} at start:\n{self.tail()}")
            got = samples(self.port, timeout=2)
            if got.get("coloc_ticks_total", {}).get((), 0) >= 2 and "coloc_io_be_ios_per_second" in got:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agent's disk guard did not report within 60 s:\n{self.tail()}")
            time.sleep(0.1)
        self.ready_s.append(time.monotonic() - began)
        self._began = began

    def io_config(self, variant: Variant | None) -> dict[str, Any]:
        policy = {**self.policy, **(variant.policy if variant else {})}
        extra = {k: yaml_value(v) for k, v in (variant.io if variant else {}).items()}
        return {"devices": [self.dev], **extra, **({"policy": policy} if policy else {})}

    def stop(self) -> None:
        """SIGTERM; a clean exit must give BE's caps back (else RuntimeError)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
            share = 100 * ticks / os.sysconf("SC_CLK_TCK") / (time.monotonic() - self._began)
            self.cpu_percent.setdefault(self._kind, []).append(share)
        rc = stop(proc, 30)
        if rc != 0:
            raise RuntimeError(f"the agent exited {rc} on SIGTERM:\n{self.tail()}")
        for rel in self.watched:
            left = be_cap(self.root, rel, self.dev)
            if left != NO_CAP:
                raise RuntimeError(f"the agent's clean exit left {rel} capped on {self.dev}: {left}\n"
                                   f"{self.tail()}")

    def capped(self) -> bool:
        """Whether BE is capped on the disk now: the tier (v2: it holds what is below it) or BE's own cgroup
        (v1's throttle is flat: the agent spreads the cap there)."""
        return any(be_cap(self.root, rel, self.dev) != NO_CAP for rel in self.watched)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc = None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


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
        self.key = "rchar" if kind.endswith("_read") else "wchar"

    def _argv(self) -> list[str]:
        at = (self.n % self.slots) * self.chunk
        common = ["bs=1M", f"count={self.chunk}", "status=none"]
        if self.kind == "small_read":  # the same bytes in 4 KiB requests
            return ["dd", f"if={self.path}", "of=/dev/null", f"skip={at * 256}", "iflag=direct", "bs=4k",
                    f"count={self.chunk * 256}", "status=none"]
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
    def __init__(self, args: argparse.Namespace, root: RealRoot, workdir: Path, dev: str,
                 agent: Agent, loop: LoopDisk | None, host_dev: str) -> None:
        self.args, self.root, self.dir, self.dev, self.agent = args, root, workdir, dev, agent
        self.loop, self.host_dev = loop, host_dev  # the contained disk, if any; the real disk below the files
        self.v1 = root.hierarchy.is_v1("blkio")
        self.writer, _ = root.writer_reader()
        self.hp = root.mkcg(HP_REL)
        self.be = root.mkcg(agent.watched[-1])
        self.writer.set_cpu_shares(TIER, 2)  # as the kubelet (and the agent's setup_tiers) lays the tier out
        if args.hp_rt:  # HP's cgroups get real-time CPU time to run SCHED_FIFO (v1 RT group scheduling)
            for rel in ("", SUB, HP_REL):
                f = self.root.path("cpu", rel) / "cpu.rt_runtime_us"
                if f.exists():
                    f.write_text("200000")
        if self.v1:  # a fresh (loop) disk's IO counted per cgroup in every case, not the agent's only
            IoMeter(root.hierarchy, root.name).count_on(dev)
        self.writer.set_memory_limit(self.be, args.be_memory_mib * MI)
        self.hp_file = workdir / "hp-read.dat"
        self.write_file = workdir / "be-write.dat"
        self.read_file = workdir / "be-read.dat"
        self.cap = IoLimit(rbps=int(args.cap_mb * MB), wbps=int(args.cap_mb * MB))
        self.trace: list[tuple[float, bool]] = []  # (when, BE capped) while the agent runs
        self.latency_set = False  # HP carries an io.latency target (a variant's)
        self.check_v2_knobs()
        self.iocost_found: str | None = None  # while a variant's blk-iocost is on: the root's `enable=`

    # -- files ---------------------------------------------------------------------------------------

    def prepare(self) -> None:
        block = os.urandom(MI)
        for path, mib in ((self.hp_file, self.args.hp_file_mib), (self.write_file, self.args.write_file_mib),
                          (self.read_file, self.args.read_file_mib)):
            with path.open("wb") as f:
                for _ in range(mib):
                    f.write(block)
            drop_cache(path)
        self.quiet(longest_s=3.0 if self.args.quick else 30.0)

    def quiet(self, below_mb_per_s: float = 1.0, longest_s: float = 30.0) -> None:
        """Wait (at most `longest_s`) for the disk to settle below `below_mb_per_s` over half a second: the
        files' writeback, a fresh ext4's lazy inode-table init, are not the first case's load."""
        end = time.monotonic() + longest_s
        before = self.disk_bytes()
        while time.monotonic() < end:
            time.sleep(0.5)
            now = self.disk_bytes()
            if (now - before) / 0.5 / MB < below_mb_per_s:
                return
            before = now
        progress(f"the disk did not settle below {below_mb_per_s:g} MB/s in {longest_s:g} s: measured as is")

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

    def disk_bytes(self, dev: str | None = None) -> int:
        """Bytes read and written on `dev` (the bench's disk) since boot, by every one."""
        fields = Path(f"/sys/dev/block/{dev or self.dev}/stat").read_text().split()
        return (int(fields[2]) + int(fields[6])) * 512

    def counters(self, flood: Flood | None) -> tuple[float, int, int, int, int]:
        return (time.monotonic(), flood.moved() if flood else 0, self.be_charged(), self.disk_bytes(),
                self.disk_bytes(self.host_dev))

    # -- one case ------------------------------------------------------------------------------------

    def run_case(self, case: str, tag: str) -> Sample:
        a = self.args
        flood_kind = next((f for f in FLOODS if f in case), None)
        with_hp = not case.startswith("be_alone")
        agent = with_agent(case)
        variant = VARIANTS.get(variant_suffix(case))
        self.scheduler(variant)
        self.v2_knobs(variant)
        # BE's own cgroup uncapped, or the static cap (v1's throttle is flat: a cap holds the cgroup it is on,
        # not those below it); the agent's cases find the tier uncapped (its clean exit gave the caps back)
        self.writer.set_io_limit(self.be, self.dev, self.cap if case.endswith("_capped") else NO_LIMIT)
        log = self.dir / f"hp-log-{tag}"
        hp: dict[str, subprocess.Popen[Any]] = {}
        flood = None
        self.trace = []
        try:
            if with_hp:
                hp = self.spawn_hp(log)  # up and waiting for their window before the agent and BE start
            if agent:
                self.agent.start(variant)  # before BE's warm-up; ticking, its guard reporting
            t_be = time.monotonic() + 0.05
            start = t_be + (a.warmup if flood_kind else 0.3)
            end = start + a.seconds
            self.start_hp(hp, start, end)
            if flood_kind:
                flood = self.flood(flood_kind)
            sleep_until(t_be)
            if flood:
                flood.start()
            c0 = self.watch_until(start, flood, agent)
            c1 = self.watch_until(end, flood, agent)
            if agent and with_hp:
                self.watch_until(end + a.lift_wait, flood, agent)  # BE still flooding: the cap lifted?
            out = Sample()
            dt = c1[0] - c0[0]
            out.be_mb_per_s = (c1[1] - c0[1]) / dt / MB
            out.be_cgroup_mb_per_s = (c1[2] - c0[2]) / dt / MB
            out.disk_mb_per_s = (c1[3] - c0[3]) / dt / MB
            out.host_disk_mb_per_s = (c1[4] - c0[4]) / dt / MB
            ends = self.collect_hp(hp, out)
            if agent:
                self.reaction(out, start, end, ends)
                if flood:
                    flood.stop()
                self.agent.stop()  # SIGTERM: the caps given back, checked
            return out
        finally:
            self.clean_case(flood, hp, log, flood_kind)

    def scheduler(self, variant: Variant | None) -> None:
        """The loop disk's scheduler for a case: the variant's, else the run's (`--loop-scheduler`); under
        BFQ, the variant's weights on HP, the BE tier and BE."""
        if self.loop is None:
            return
        want = variant.sched if variant is not None and variant.sched else self.args.loop_scheduler
        if self.loop.scheduler() != want or (variant is not None and variant.iosched):
            self.loop.set_scheduler("none")  # a switch starts the scheduler afresh, with its default tunables
            self.loop.set_scheduler(want)
        for key, value in (variant.iosched if variant is not None else {}).items():
            (self.loop.queue / "iosched" / key).write_text(value)
        if want == "bfq" and variant is not None:
            weights = {HP_REL: variant.hp_weight, TIER: variant.be_weight, self.be: variant.be_weight}
            for rel, w in weights.items():
                self.bfq_weight(rel, w)

    def check_v2_knobs(self) -> None:
        """ValueError, before any case runs, for a variant whose knob this kernel does not have."""
        for v in VARIANTS.values():
            if self.v1 and (v.hp_latency_us or v.iocost):
                raise ValueError(f"--variant {v.name}: hp_latency_us and iocost are cgroup v2's")
            if v.hp_latency_us and not (self.root.path("unified", HP_REL) / "io.latency").exists():
                raise ValueError(f"--variant {v.name}: this kernel has no io.latency (blk-iolatency, "
                                 "CONFIG_BLK_CGROUP_IOLATENCY)")
            if v.iocost and not self.iocost_file().exists():
                raise ValueError(f"--variant {v.name}: this kernel has no io.cost.qos (blk-iocost, "
                                 "CONFIG_BLK_CGROUP_IOCOST)")

    def v2_knobs(self, variant: Variant | None) -> None:
        """v2's own knobs for a case: HP's `io.latency` target, blk-iocost with `io.weight` (the root's
        `io.cost.qos`: node-wide, so the bench puts back what it found, at each case without it and at the
        end); every other case finds none of them."""
        if self.v1:  # check_v2_knobs refused their variants
            return
        target = variant.hp_latency_us if variant is not None else 0
        if target or self.latency_set:
            (self.root.path("unified", HP_REL) / "io.latency").write_text(
                f"{self.dev} target={target if target else 'max'}")
            self.latency_set = bool(target)
        if variant is not None and variant.iocost:
            self.iocost_on(variant)
        elif self.iocost_found is not None:
            self.iocost_off()

    def iocost_on(self, variant: Variant) -> None:
        """blk-iocost on the disk (what the root had kept, to put back) and the variant's `io.weight`s."""
        qos = self.iocost_file()
        if self.iocost_found is None:
            line = next((ln for ln in qos.read_text().splitlines() if ln.split()[:1] == [self.dev]), "")
            self.iocost_found = "enable=1" if "enable=1" in line.split() else "enable=0"
        qos.write_text(f"{self.dev} enable=1")
        for rel, w in ((HP_REL, variant.hp_weight), (TIER, variant.be_weight), (self.be, variant.be_weight)):
            (self.root.path("unified", rel) / "io.weight").write_text(f"default {w}")

    def iocost_file(self) -> Path:
        assert self.root.hierarchy.unified is not None  # v2 (v2_knobs refuses these variants on v1)
        return self.root.hierarchy.unified / "io.cost.qos"

    def iocost_off(self) -> None:
        """The root's blk-iocost as the bench found it, the weights back at their default."""
        assert self.iocost_found is not None
        self.iocost_file().write_text(f"{self.dev} {self.iocost_found}")
        self.iocost_found = None
        for rel in (HP_REL, TIER, self.be):
            (self.root.path("unified", rel) / "io.weight").write_text("default 100")

    def bfq_weight(self, rel: str, weight: int) -> None:
        """A cgroup's BFQ weight (v1 `blkio.bfq.weight`, v2 `io.bfq.weight`), 1-1000."""
        if self.v1:
            (self.root.path("blkio", rel) / "blkio.bfq.weight").write_text(str(weight))
        else:
            (self.root.path("unified", rel) / "io.bfq.weight").write_text(str(weight))

    def flood(self, kind: str) -> Flood:
        a = self.args
        target = self.read_file if kind.endswith("_read") else self.write_file
        mib = a.read_file_mib if kind.endswith("_read") else a.write_file_mib
        return Flood(self.root, self.be, kind, target, mib, min(a.chunk_mib, mib))

    def spawn_hp(self, log: Path) -> dict[str, subprocess.Popen[Any]]:
        """HP's two processes, up (interpreter started, file open) and waiting for their window on stdin
        (`start_hp`): on a loaded machine a process still starting could miss a window it was given."""
        rt = ["chrt", "-f", str(self.args.hp_rt)] if self.args.hp_rt else []
        hp = {kind: self.root.spawn(self.hp, [*rt, sys.executable, "-c", HP_PROG, kind, str(path)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
              for kind, path in (("fsync", log), ("read", self.hp_file))}
        for kind, proc in hp.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != b"ready":
                raise RuntimeError(f"HP {kind} did not start (it printed {line[:200]!r})")
        return hp

    def start_hp(self, hp: dict[str, subprocess.Popen[Any]], start: float, end: float) -> None:
        """HP's window and pace: an op every --commit-ms (commits) or --read-ms (reads), `start` to `end`."""
        every = {"fsync": self.args.commit_ms, "read": self.args.read_ms}
        for kind, proc in hp.items():
            assert proc.stdin is not None
            proc.stdin.write(f"{start!r} {end!r} {every[kind] / 1000!r}\n".encode())
            proc.stdin.close()

    def collect_hp(self, hp: dict[str, subprocess.Popen[Any]], out: Sample) -> list[tuple[float, float]]:
        """HP's latencies and ops/s into `out`; each process's first op's start and last op's end."""
        ends = []
        for kind, proc in hp.items():
            assert proc.stdout is not None
            stdout = proc.stdout.read()  # ends when the process does: its last line, then EOF
            proc.stdout.close()
            proc.wait(60)
            self.root.procs.remove(proc)
            if proc.returncode != 0:
                raise RuntimeError(f"HP {kind} exited {proc.returncode}")
            got = json.loads(stdout)
            setattr(out, f"{kind}_ms", got["lat_ms"])
            setattr(out, f"{kind}_settled_ms",
                    [x for x, at in zip(got["lat_ms"], got["at_s"], strict=True) if at >= SETTLE_S])
            setattr(out, f"{kind}_ops_per_s", len(got["lat_ms"]) / got["span_s"])
            ends.append((got["first"], got["last"]))
        return ends

    def clean_case(self, flood: Flood | None, hp: dict[str, subprocess.Popen[Any]], log: Path,
                   flood_kind: str | None) -> None:
        if flood:
            flood.stop()
        for proc in hp.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.agent.proc is not None:  # on the way out of a failure: SIGTERM, then SIGKILL
            try:
                self.agent.stop()
            finally:
                self.agent.kill()
        log.unlink(missing_ok=True)
        if flood_kind == "buffered_write":
            drop_cache(self.write_file)  # its dirty pages written now, not in the next case

    def reaction(self, out: Sample, start: float, end: float, ends: list[tuple[float, float]]) -> None:
        """The cut (HP's first op to the first cap seen) and the lift (HP's last op to no cap seen), and the
        share of the measured window BE was capped, from the cap file's trace."""
        window = [c for t, c in self.trace if start <= t <= end]
        out.capped_share = sum(window) / len(window) if window else None
        if not ends:  # BE alone with the agent: only the share (HP idle: there should be no cap)
            return
        first, last = min(e[0] for e in ends), max(e[1] for e in ends)
        out.capped_before_hp = any(c for t, c in self.trace if t < first)
        out.cut_s = next((t - first for t, c in self.trace if t >= first and c), None)
        at_stop = [c for t, c in self.trace if t <= last]
        if at_stop and at_stop[-1]:
            out.lift_s = next((t - last for t, c in self.trace if t > last and not c), None)

    def watch_until(self, when: float, flood: Flood | None,
                    trace: bool = False) -> tuple[float, int, int, int, int]:
        """Keep the flood going until `when` (and with `trace`, read BE's cap file every ~10 ms), then the
        counters."""
        seen = 0.0
        while (left := when - time.monotonic()) > 0:
            if flood:
                flood.tend()
            now = time.monotonic()
            if trace and now - seen >= 0.01:
                seen = now
                self.trace.append((now, self.agent.capped()))
            time.sleep(min(left, 0.005))
        return self.counters(flood)


def yaml_value(text: str) -> Any:
    """A variant's io.KEY=VALUE as the config wants it: a number, true/false, a name, a list (`a+b`)."""
    if "+" in text:
        return [yaml_value(x) for x in text.split("+")]
    if text in ("true", "false"):
        return text == "true"
    with contextlib.suppress(ValueError):
        return float(text) if "." in text else int(text)
    return text


def sleep_until(when: float) -> None:
    left = when - time.monotonic()
    if left > 0:
        time.sleep(left)


def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def summarise(results: dict[str, list[Sample]], args: argparse.Namespace, dev: str,
              mode: str) -> dict[str, Any]:
    hp_cases, _ = case_names(args.capped)
    out: dict[str, Any] = {"cgroup_mode": mode, "device": dev, "loop_disk": bool(args.loop_mib),
                           "loop_scheduler": args.loop_scheduler if args.loop_mib else None,
                           "variants": {v.name: variant_words(v) for v in VARIANTS.values()},
                           "cap_mb_per_s": args.cap_mb,
                           "rounds": args.rounds, "seconds_per_case": args.seconds,
                           "be_memory_mib": args.be_memory_mib,
                           "be_cgroup": TIER if args.be_in_tier else BE_REL}
    for case, rs in results.items():
        if not case.startswith("be_alone"):
            hp_figures(out, case, rs)
        be_figures(out, case, rs)
    alone = results["alone"]
    for case in hp_cases[1:]:
        rs = results[case]
        for kind in ("fsync", "read"):
            out[f"{case}_{kind}_p99_over_alone_ratio"] = round(
                out[f"{case}_{kind}_p99_ms"] / max(out[f"alone_{kind}_p99_ms"], 1e-3), 2)
            if f"{case}_{kind}_settled_p99_ms" in out and f"alone_{kind}_settled_p99_ms" in out:
                out[f"{case}_{kind}_settled_p99_over_alone_ratio"] = round(
                    out[f"{case}_{kind}_settled_p99_ms"] / max(out[f"alone_{kind}_settled_p99_ms"], 1e-3), 2)
        # per round against that round's HP alone, then the median
        out[f"{case}_ops_over_alone_ratio"] = round(statistics.median(
            (r.fsync_ops_per_s + r.read_ops_per_s) / max(al.fsync_ops_per_s + al.read_ops_per_s, 1e-3)
            for r, al in zip(rs, alone, strict=True)), 3)
    for f in FLOODS:
        for k in kinds(args.capped)[1:]:
            if f"be_alone_{f}{k}" in results:
                out[f"be_alone_{f}{k}_over_alone_ratio"] = round(statistics.median(
                    x.be_mb_per_s / max(y.be_mb_per_s, 1e-3)
                    for x, y in zip(results[f"be_alone_{f}{k}"], results[f"be_alone_{f}"], strict=True)), 3)
        # BE's IO its cgroup is charged for, beside HP with no agent: what a per-cgroup cap can hold at all
        out[f"{f}_charged_share"] = round(out[f"{f}_be_cgroup_mb_per_s"] / max(out[f"{f}_be_mb_per_s"], 1e-3),
                                          3)
    reaction_figures(out, results)
    targets(out)
    return out


def variant_words(v: Variant) -> str:
    words = ["agent" if v.agent else "no agent", *(f"{k}={x:g}" for k, x in v.policy.items()),
             *(f"io.{k}={x}" for k, x in v.io.items())]
    if v.sched:
        words.append(f"scheduler {v.sched}" + (f", bfq weight HP {v.hp_weight} BE {v.be_weight}"
                                                 if v.sched == "bfq" else ""))
    words += [f"{k}={x}" for k, x in v.iosched.items()]
    if v.hp_latency_us:
        words.append(f"HP io.latency target {v.hp_latency_us} us")
    if v.iocost:
        words.append(f"blk-iocost, io.weight HP {v.hp_weight} BE {v.be_weight}")
    return ", ".join(words)


def be_figures(out: dict[str, Any], case: str, rs: list[Sample]) -> None:
    """BE's and the disk's MB/s (medians of rounds) in one case; with the agent, the share BE was capped."""
    if case != "alone":
        for key in ("be_mb_per_s", "be_cgroup_mb_per_s", "disk_mb_per_s"):
            name = key.removeprefix("be_") if case.startswith("be_alone") and key != "disk_mb_per_s" else key
            out[f"{case}_{name}"] = round(statistics.median(getattr(r, key) for r in rs), 1)
    if out.get("loop_disk"):
        out[f"{case}_host_disk_mb_per_s"] = round(statistics.median(r.host_disk_mb_per_s for r in rs), 1)
    if with_agent(case):
        out[f"{case}_capped_share"] = med([r.capped_share for r in rs if r.capped_share is not None])


def hp_figures(out: dict[str, Any], case: str, rs: list[Sample]) -> None:
    """HP's latencies (pooled over rounds) and ops/s (median of rounds) in one case."""
    for kind in ("fsync", "read"):
        pooled = [x for r in rs for x in getattr(r, f"{kind}_ms")]
        out[f"{case}_{kind}_p50_ms"] = round(pct(pooled, 50), 3)
        out[f"{case}_{kind}_p99_ms"] = round(pct(pooled, 99), 3)
        out[f"{case}_{kind}_max_ms"] = round(max(pooled, default=float("nan")), 3)
        settled = [x for r in rs for x in getattr(r, f"{kind}_settled_ms")]
        if settled:
            out[f"{case}_{kind}_settled_p99_ms"] = round(pct(settled, 99), 3)
        out[f"{case}_{kind}_ops_per_s"] = round(statistics.median(getattr(r, f"{kind}_ops_per_s")
                                                                  for r in rs), 1)
    out[f"{case}_ops_per_s"] = round(statistics.median(r.fsync_ops_per_s + r.read_ops_per_s for r in rs), 1)


def reaction_figures(out: dict[str, Any], results: dict[str, list[Sample]]) -> None:
    cuts, lifts = [], []
    for f in FLOODS:
        for k in ("_agent", *(s for s, v in VARIANTS.items() if v.agent)):
            rs = results[f"{f}{k}"]
            c = [r.cut_s for r in rs if r.cut_s is not None]
            li = [r.lift_s for r in rs if r.lift_s is not None]
            out[f"{f}{k}_cut_s_median"], out[f"{f}{k}_lift_s_median"] = med(c), med(li)
            out[f"{f}{k}_never_cut"] = sum(1 for r in rs if r.cut_s is None)
            out[f"{f}{k}_never_lifted"] = sum(1 for r in rs if r.cut_s is not None and r.lift_s is None)
            out[f"{f}{k}_capped_before_hp"] = sum(1 for r in rs if r.capped_before_hp)
            if k == "_agent":  # the shipped policy's reaction
                cuts += c
                lifts += li
    out["io_cut_s_median"], out["io_lift_s_median"] = med(cuts), med(lifts)
    out["io_cut_s_max"] = round(max(cuts), 3) if cuts else None
    out["io_lift_s_max"] = round(max(lifts), 3) if lifts else None
    out["io_reaction_trials"] = sum(len(results[f"{f}_agent"]) for f in FLOODS)


def targets(out: dict[str, Any]) -> None:
    """The issue's targets with the agent, flood by flood (a flood BE's cgroup is not charged for, v1's
    buffered writes, is one no per-cgroup cap can hold: `<flood>_attributable` false)."""
    out.update(target_p99_over_alone_ratio=TARGET_P99_RATIO, target_ops_over_alone_ratio=TARGET_OPS_RATIO,
               target_be_share=TARGET_BE_SHARE, target_reaction_s=TARGET_REACTION_S)
    for f in FLOODS:
        out[f"{f}_attributable"] = out[f"{f}_charged_share"] >= 0.5
        for k in ("_agent", *VARIANTS):
            c = f"{f}{k}"
            out[f"{c}_target_met"] = (out[f"{c}_fsync_p99_over_alone_ratio"] <= TARGET_P99_RATIO
                                      and out[f"{c}_read_p99_over_alone_ratio"] <= TARGET_P99_RATIO
                                      and out[f"{c}_ops_over_alone_ratio"] >= TARGET_OPS_RATIO)
            if f"be_alone_{c}_over_alone_ratio" in out:
                out[f"be_alone_{c}_target_met"] = out[f"be_alone_{c}_over_alone_ratio"] >= TARGET_BE_SHARE
    cut, lift = out["io_cut_s_median"], out["io_lift_s_median"]
    out["io_reaction_target_met"] = (cut is not None and lift is not None
                                     and max(cut, lift) <= TARGET_REACTION_S)


def table(results: dict[str, list[Sample]], out: dict[str, Any]) -> None:
    print(f"{'case':<28} {'commit p50/p99/max ms':>24} {'p99 range':>15} {'read p50/p99/max ms':>22} "
          f"{'commit/s':>8} {'read/s':>7} {'ops':>5} {'BE MB/s':>8} {'charged':>8} {'disk':>7} {'capped':>6}")
    for case, rs in results.items():
        if case.startswith("be_alone"):
            hp = " " * 96
        else:
            p99s = [pct(r.fsync_ms, 99) for r in rs]
            ratio = out.get(f"{case}_ops_over_alone_ratio", 1.0)
            hp = (f"{out[f'{case}_fsync_p50_ms']:>7.2f}/{out[f'{case}_fsync_p99_ms']:>7.2f}/"
                  f"{out[f'{case}_fsync_max_ms']:>8.1f} {min(p99s):>7.1f}-{max(p99s):<7.1f}"
                  f"{out[f'{case}_read_p50_ms']:>6.2f}/{out[f'{case}_read_p99_ms']:>6.2f}/"
                  f"{out[f'{case}_read_max_ms']:>8.1f} {out[f'{case}_fsync_ops_per_s']:>8.0f} "
                  f"{out[f'{case}_read_ops_per_s']:>7.0f} {ratio:>5.2f}")
        be = ""
        if case != "alone":
            pre = "" if case.startswith("be_alone") else "be_"
            share = out.get(f"{case}_capped_share")
            be = (f"{out[f'{case}_{pre}mb_per_s']:>8.1f} {out[f'{case}_{pre}cgroup_mb_per_s']:>8.1f} "
                  f"{out[f'{case}_disk_mb_per_s']:>7.1f} {'' if share is None else f'{share:>6.2f}'}")
        print(f"{case:<28} {hp} {be}")
    ok = {True: "met", False: "MISSED"}
    for c in (f"{f}{k}" for f in FLOODS for k in ("_agent", *VARIANTS)):
        f = next(f for f in FLOODS if c.startswith(f))
        uncharged = "" if out[f"{f}_attributable"] else ", BE not charged for it"
        wc = f"be_alone_{c}"
        share = (f"; BE alone with the agent {out[f'{wc}_over_alone_ratio']:.2f} of without "
                 f"({ok[out[f'{wc}_target_met']]})" if f"{wc}_over_alone_ratio" in out else "")
        reaction = (f"; cut {out[f'{c}_cut_s_median']} s, lift {out[f'{c}_lift_s_median']} s (never cut "
                    f"{out[f'{c}_never_cut']})" if f"{c}_cut_s_median" in out else "")
        print(f"{c:<22} commit p99 {out[f'{c}_fsync_p99_over_alone_ratio']:.2f}x alone, read p99 "
              f"{out[f'{c}_read_p99_over_alone_ratio']:.2f}x, ops {out[f'{c}_ops_over_alone_ratio']:.2f} of "
              f"alone ({ok[out[f'{c}_target_met']]}{uncharged}){share}{reaction}")
    print(f"reaction: cut median {out['io_cut_s_median']} s (max {out['io_cut_s_max']}), lift median "
          f"{out['io_lift_s_median']} s (max {out['io_lift_s_max']}) ({ok[out['io_reaction_target_met']]})")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, float]]:
    """The options (FLOODS and VARIANTS set from them) and --io-policy's settings; exits on bad input."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI: 1 round, 1 s per case, small files (< 60 s)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=6.0, help="HP's measured window per case")
    p.add_argument("--warmup", type=float, default=1.0, help="BE runs this long before HP's window")
    p.add_argument("--lift-wait", type=float, default=2.0,
                   help="with the agent, BE keeps flooding this long after HP stops (the lift)")
    p.add_argument("--capped", action="store_true", help="also the static-cap cases (`<flood>_capped`)")
    p.add_argument("--be-in-tier", action="store_true",
                   help="BE's processes in the besteffort tier itself, not in a pod cgroup below it")
    p.add_argument("--cap-mb", type=float, default=20.0, help="the static cap (--capped), MB/s (10^6 B)")
    p.add_argument("--commit-ms", type=float, default=5.0)
    p.add_argument("--read-ms", type=float, default=1.0)
    p.add_argument("--hp-file-mib", type=int, default=64)
    p.add_argument("--write-file-mib", type=int, default=128, help="BE's write target (2× its memory)")
    p.add_argument("--read-file-mib", type=int, default=256)
    p.add_argument("--chunk-mib", type=int, default=64, help="MiB per dd run")
    p.add_argument("--be-memory-mib", type=int, default=64)
    p.add_argument("--dir", type=Path, default=None, help="where the files go (a real disk, not tmpfs)")
    p.add_argument("--agent-tree", type=Path, default=REPO,
                   help="the agent's code: this checkout, or a tree of it (`git archive` of a commit), run "
                        "with it as the working directory")
    p.add_argument("--floods", default=",".join(DEFAULT_FLOODS),
                   help=f"the BE floods measured, comma-separated, of {','.join(ALL_FLOODS)} (default: "
                        f"{','.join(DEFAULT_FLOODS)})")
    p.add_argument("--hp-rt", type=int, default=0, metavar="PRIO",
                   help="HP's processes SCHED_FIFO at this priority: the latency is then the disk's, not the "
                        "wait for a CPU other work keeps busy")
    p.add_argument("--loop-mib", type=int, default=0,
                   help="run on a contained disk: a loop device (direct IO) of this many MiB over a file "
                        "in --dir, ext4 on it, made and removed by the bench; its scheduler is the bench's")
    p.add_argument("--loop-scheduler", default="mq-deadline",
                   help="the loop disk's scheduler in every case but a variant's (default: the host disk's)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:SPEC",
                   help="more cases: NAME:agent=0|1,sched=bfq,hp_weight=N,be_weight=N,io.KEY=V,POLICY_KEY=N "
                        "(cases <flood>_NAME, be_alone_<flood>_NAME); sched needs --loop-mib")
    p.add_argument("--io-policy", default="",
                   help="io.policy settings for the agent instead of the shipped ones, e.g. floor_mbps=10")
    args = p.parse_args(argv)
    floods = tuple(f for f in args.floods.split(",") if f)
    if not floods or set(floods) - set(ALL_FLOODS):
        p.error(f"--floods: each of {', '.join(ALL_FLOODS)}, got {args.floods!r}")
    FLOODS[:] = floods
    try:
        for text in args.variant:
            v = parse_variant(text)
            if (v.sched or v.iosched) and not args.loop_mib:
                raise ValueError(f"--variant {text!r}: sched, iosched need --loop-mib (not the host's disk)")
            VARIANTS[v.suffix] = v
    except ValueError as err:
        p.error(str(err))
    try:
        policy = {k: float(v) for k, v in (kv.split("=", 1) for kv in args.io_policy.split(",") if kv)}
    except ValueError:
        p.error(f"--io-policy: KEY=NUMBER,... , got {args.io_policy!r}")
    return args, policy


def main(argv: list[str]) -> int:
    args, policy = parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.lift_wait = 1, 1.0, 0.3, 1.5
        args.hp_file_mib, args.write_file_mib, args.read_file_mib, args.chunk_mib = 16, 48, 32, 8
        args.be_memory_mib = 24
    if shutil.which("dd") is None:
        print("bench/io.py: `dd` is not installed (Debian package coreutils)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    workdir = args.dir or Path(f"/var/tmp/coloc-bench-io-{os.getpid()}")
    workdir.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix="coloc-bench-io-agent-"))  # the agent's state, socket, log
    try:
        with contextlib.ExitStack() as stack:
            host_dev = disk_of(os.stat(workdir).st_dev)
            if host_dev is None:
                print(f"bench/io.py: {workdir} is not on a disk (tmpfs, overlay, loop, dm?): pass --dir on "
                      "one", file=sys.stderr)
                return 2
            dev, files, loop = host_dev, workdir, None
            if args.loop_mib:
                try:  # removed after the cgroups (and their processes) are
                    loop = stack.enter_context(loop_disk(workdir, args.loop_mib, args.loop_scheduler))
                except LoopUnavailable as err:
                    print(f"bench/io.py: no loop disk: {err}", file=sys.stderr)
                    return 2
                dev, files = loop.dev, loop.mount
            try:
                root = RealRoot(prefix="coloc-bench-io")
            except CgroupsUnavailable as err:
                print(f"bench/io.py: {err}", file=sys.stderr)
                return 2
            try:
                with_blkio(root)
                if not (root.hierarchy.is_v1("blkio") or root.hierarchy.mode == "v2"):
                    print("bench/io.py: no blkio (v1) or io (v2) controller here", file=sys.stderr)
                    return 2
                be = TIER if args.be_in_tier else BE_REL
                agent = Agent(root, dev, tmp, args.agent_tree.resolve(), be, policy)
                try:
                    bench = Bench(args, root, files, dev, agent, loop, host_dev)
                except ValueError as err:
                    print(f"bench/io.py: {err}", file=sys.stderr)
                    return 2
                try:
                    return measure(args, root, bench)
                finally:
                    if bench.iocost_found is not None:  # node-wide: put back even on the way out of a failure
                        bench.iocost_off()
            finally:
                root.cleanup()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def with_blkio(root: RealRoot) -> None:
    """On v1, the root in the `blkio` hierarchy too, when the kit's list of controllers leaves it out: the
    cgroups made, joined and removed there like in every other hierarchy."""
    h = root.hierarchy
    if h.is_v1("blkio") and "blkio" not in root.mounts:
        root.mounts["blkio"] = h.v1["blkio"]
        (h.v1["blkio"] / root.name).mkdir()


def measure(args: argparse.Namespace, root: RealRoot, bench: Bench) -> int:
    dev, agent = bench.dev, bench.agent
    on = (f" (loop disk {bench.loop.name} on {bench.host_dev}, scheduler {args.loop_scheduler})"
          if bench.loop else "")
    progress(f"disk {dev}{on}, {bench.dir}, cgroups {root.hierarchy.mode}; writing the files")
    bench.prepare()
    hp_cases, be_cases = case_names(args.capped)
    cases = hp_cases + be_cases
    results: dict[str, list[Sample]] = {c: [] for c in cases}
    for r in range(args.rounds):
        for case in cases if r % 2 == 0 else tuple(reversed(cases)):
            s = bench.run_case(case, f"{r}-{case}")
            results[case].append(s)
            hp = (f"commit p99 {pct(s.fsync_ms, 99):.2f} ms, read p99 {pct(s.read_ms, 99):.2f} ms, "
                  f"{s.fsync_ops_per_s + s.read_ops_per_s:.0f} ops/s, " if s.fsync_ms else "")
            host = f" (host disk {s.host_disk_mb_per_s:.1f})" if bench.loop else ""
            guard = "" if s.capped_share is None else (
                f"; capped {s.capped_share:.0%} of the window, cut {fmt(s.cut_s)} s, lift {fmt(s.lift_s)} s")
            progress(f"round {r} {case}: {hp}BE {s.be_mb_per_s:.1f} MB/s (charged "
                     f"{s.be_cgroup_mb_per_s:.1f}), disk {s.disk_mb_per_s:.1f} MB/s{host}{guard}")
    out = summarise(results, args, dev, root.hierarchy.mode)
    table(results, out)
    out["agent_starts"] = agent.starts
    out["agent_ready_s_median"] = med(agent.ready_s)
    out["agent_cpu_percent_median"] = med(agent.cpu_percent.get("agent", []))
    for name, runs in agent.cpu_percent.items():
        if name != "agent":
            out[f"{name}_agent_cpu_percent_median"] = med(runs)
    out["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return finish("bench/io.py", out, required(args.capped))


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
