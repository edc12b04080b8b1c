"""The trace and its replay (issue 35): what recording costs a tick, how big a trace is, how fast it replays.

Side by side in one run:

1. **A tick with the trace on and off.** Two real agent runtimes (collector, policies, executor, loop) on one
   private cgroup root of 200 workloads (100 BE, 100 HP, two of them burning CPU), one recording a trace and
   one not, tick in blocks, alternating which goes first round by round: each tick's wall time
   (`TickLoop.tick`, the whole tick), the CPU a tick costs the process over its block (every thread: the
   writer's JSON, zlib and disk too), and the recorder's own time on the loop's thread. Medians and the
   ratio. The trace they write gives bytes per tick of a real node's snapshot.
2. **A day of 1-second ticks at 200 workloads.** A synthetic node (32 CPUs; 120 BE pods and YARN containers,
   80 HP pods; HP load on a daily curve with noise, every workload's usage moving every tick, a BE workload
   replaced every minute; BE's requests fit the batch room but at HP's daily peak, when batch overcommit
   acts) runs the real pipeline and the real recorder for `--ticks` ticks (86,400: a day);
   then `Replay` replays the trace with its recorded settings. Trace bytes per tick (compressed, on disk) and
   a day's size; replay seconds (wall and CPU: on a machine busy with other work the wall clock measures the
   others too, so the 1-minute load average is printed beside it) and × real time; every replayed tick must
   decide as recorded (`ticks_differing` 0, else exit 1). `--quick` replays 1,200 ticks and scales to a day.

Needs root and writable cgroups (part 1); removes what it makes. Last line: one JSON object.

    python3 bench/replay.py [--ticks 86400] [--rounds 5] [--tick-samples 40] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kit.bench import finish, progress
from kit.realcg import CgroupsUnavailable, RealRoot

from agent.config.agent import AgentConfig, CgroupConfig, LoopConfig, NodeConfig, StateConfig
from agent.config.trace import TraceConfig
from agent.daemon.runtime import Runtime, build
from agent.demo.spawn import workload_argv
from agent.published import ActionRecord, Outcome
from agent.trace.files import TraceWriter, trace_files
from agent.trace.params import tick_settings
from agent.trace.recorder import TickRecorder, TickTrace
from agent.trace.replay import Replay, records
from qos.actions import Evict
from qos.model import NodeSnapshot, Resources, Source, Tier, Usage, Workload

GIB = 1 << 30
DAY_S = 86_400
TARGET_DAY_S = 90.0


# ---- part 1: a real tick, trace on and off ---------------------------------------------------------------

def _config(root: str, trace_dir: str | None) -> AgentConfig:
    trace = TraceConfig(enabled=True, dir=trace_dir) if trace_dir else TraceConfig()
    return AgentConfig(node=NodeConfig(name="bench", cpus=2, memory=64 * GIB, scope="cgroup-root"),
                       cgroups=CgroupConfig(root=root, setup_tiers=True, cleanup_on_exit=False),
                       loop=LoopConfig(interval_s=1.0), state=StateConfig(path=""), trace=trace)


def _layout(root: RealRoot, n: int) -> None:
    for i in range(n // 2):
        root.mkcg(f"besteffort/w{i:03d}")
        root.mkcg(f"hp{i:03d}")
    root.spawn("besteffort/w000", workload_argv("burn"))
    root.spawn("hp000", workload_argv("burn"))


def _timed_record(spent: list[float]) -> None:
    """Time the recorder's work on the loop's thread (the hook the loop calls)."""
    record = TickRecorder.record

    def timed(self: TickRecorder, t: TickTrace) -> None:
        started = time.perf_counter()
        record(self, t)
        spent.append(time.perf_counter() - started)
    TickRecorder.record = timed  # type: ignore[method-assign]


def _block(rt: Runtime, samples: int) -> tuple[list[float], float]:
    """`samples` ticks of `rt` 50 ms apart, then a wait for the trace's writer to have written them: each
    tick's wall time, and the process's CPU seconds a tick over the block (every thread: the writer's too)."""
    walls = []
    cpu = time.process_time()
    for _ in range(samples):
        started = time.perf_counter()
        rt.loop.tick()
        walls.append(time.perf_counter() - started)
        time.sleep(0.05)  # the CPU counters move between ticks, and the writer's thread works between them
    time.sleep(0.4)  # the writer takes what is queued every 0.25 s
    return walls, (time.process_time() - cpu) / samples


def tick_costs(root: RealRoot, d: Path, rounds: int, samples: int) -> dict[str, object]:
    """Blocks of ticks of two runtimes, trace off and on, in alternating order round by round (the machine's
    drift hits both alike): each tick's wall time, the CPU a tick costs the whole process (the writer's
    thread included), and the recorder's own time on the loop's thread."""
    spent: list[float] = []
    _timed_record(spent)
    runtimes: dict[str, Runtime] = {"off": build(_config(root.name, None)),
                                    "on": build(_config(root.name, str(d / "real")))}
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for rt in runtimes.values():  # warm-up: rates need two readings
            for _ in range(3):
                rt.loop.tick()
        spent.clear()
        for r in range(rounds):
            for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                walls, cpu = _block(runtimes[name], samples)
                times[name] += walls
                cpus[name].append(cpu)
            cpu_off, cpu_on = statistics.median(cpus["off"]) * 1e3, statistics.median(cpus["on"]) * 1e3
            progress(f"round {r}: tick off {statistics.median(times['off']) * 1e3:.2f} ms, "
                     f"on {statistics.median(times['on']) * 1e3:.2f} ms (CPU {cpu_off:.2f} / {cpu_on:.2f} "
                     f"ms), recording {statistics.median(spent) * 1e3:.3f} ms")
        trace = runtimes["on"].trace
        recorder = trace.recorder if trace is not None else None
        assert recorder is not None
        ticks = recorder.ticks
    finally:
        for rt in runtimes.values():
            rt.close()
    size = sum(f.stat().st_size for f in trace_files(d / "real"))
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    workloads = len(runtimes["on"].board.get().snapshot.workloads)  # type: ignore[union-attr]
    cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
    return {"workloads_real": workloads, "tick_ms_trace_off": round(off * 1e3, 3),
            "tick_ms_trace_on": round(on * 1e3, 3), "tick_on_over_off_ratio": round(on / off, 3),
            "tick_cpu_ms_trace_off": round(cpu_off * 1e3, 3), "tick_cpu_ms_trace_on": round(cpu_on * 1e3, 3),
            "record_ms_per_tick": round(statistics.median(spent) * 1e3, 3),
            "record_ms_per_tick_p90": round(sorted(spent)[int(len(spent) * 0.9)] * 1e3, 3),
            "trace_bytes_per_tick_real": round(size / ticks, 1)}


# ---- part 2: a synthetic day, recorded and replayed --------------------------------------------------------

class SyntheticNode:
    """200 workloads whose usage moves every tick; HP load on a daily curve."""

    def __init__(self, seed: int = 35) -> None:
        self.rng = random.Random(seed)
        self.serial = 0
        self.be = [self._be() for _ in range(120)]
        self.hp = [self._workload(f"k8s/hp-{i}", Tier.BURSTABLE, False, 9000) for i in range(80)]
        self.cpus = tuple(range(32))

    def _workload(self, key: str, tier: Tier, be: bool, prio: int) -> Workload:
        src = Source.YARN if key.startswith("yarn/") else Source.K8S
        cgroup = f"{tier.value}/{key.replace('/', '-')}"
        # BE asks for 80m each (9.6 cores in all): within the batch room but at HP's daily peak
        return Workload(key, key.rsplit("/", 1)[-1], src, tier, be, prio, cgroup,
                        Resources(80 if be else 200, GIB // 4), started_at=float(self.serial), pids=4)

    def _be(self) -> Workload:
        self.serial += 1
        if self.serial % 3 == 0:
            key = f"yarn/container_e01_1700000000000_{self.serial // 100:04d}_01_{self.serial:06d}"
        else:
            key = f"k8s/be-{self.serial:06d}"
        return self._workload(key, Tier.BESTEFFORT, True, 3000 + self.serial % 2000)

    def snapshot(self, t: float, i: int) -> NodeSnapshot:
        rng = self.rng
        if i % 60 == 0:
            self.be[rng.randrange(len(self.be))] = self._be()
        day = 0.5 + 0.4 * math.sin(2 * math.pi * i / DAY_S)
        ws = []
        hp_cpu = be_cpu = 0.0
        hp_mem = be_mem = 0
        for w in self.hp:
            cpu = max(0.0, 100 * day + rng.gauss(0, 15))
            mem = int(300e6 + rng.gauss(0, 5e6))
            hp_cpu += cpu
            hp_mem += mem
            ws.append(dataclasses.replace(w, usage=Usage(cpu, mem, 0.0), sample_age_s=0.0))
        for w in self.be:
            cpu = max(0.0, 90 + rng.gauss(0, 30))
            mem = int(200e6 + rng.gauss(0, 5e6))
            be_cpu += cpu
            be_mem += mem
            ws.append(dataclasses.replace(w, usage=Usage(cpu, mem, 0.0), sample_age_s=0.0))
        system = Usage(800.0 + rng.gauss(0, 50), 4 * GIB)
        node = Usage(hp_cpu + be_cpu + (system.milli_cpu or 0), hp_mem + be_mem + 4 * GIB)
        return NodeSnapshot(taken_at=t, capacity=Resources(32_000, 128 * GIB), cpus=self.cpus,
                            node_usage=node, hp_usage=Usage(hp_cpu, hp_mem), be_usage=Usage(be_cpu, be_mem),
                            system_usage=system, workloads=tuple(ws),
                            hp_cpu_pressure_some_avg10=max(0.0, rng.gauss(2, 2)))


def record_day(d: Path, ticks: int) -> tuple[float, int]:
    """Record `ticks` synthetic ticks with the real pipeline and recorder; (seconds, recorder ticks)."""
    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    pipeline = settings.pipeline()
    writer = TraceWriter(d, file_bytes=64_000_000, files=1000, queue_lines=1_000_000)
    recorder = TickRecorder(writer, lambda: settings, list, "synthetic")
    node = SyntheticNode()
    state = pipeline.initial_state()
    t0 = 1_700_000_000.0
    started = time.perf_counter()
    for i in range(ticks):
        at = t0 + i
        snap = node.snapshot(at, i)
        decision = pipeline.decide(snap, state)
        victims = {a.key for a in decision.actions if isinstance(a, Evict)}
        done = [ActionRecord(at, "memory_pressure", "evict", k, Outcome.SKIPPED, "bench: not carried out")
                for k in sorted(victims)]
        recorder.record(TickTrace(i + 1, at, state, (), (), snap, decision, done, victims))
        state = pipeline.forget(decision.state, victims)
        if i and i % 20_000 == 0:
            progress(f"recorded {i} ticks")
    writer.close(timeout_s=120)
    assert writer.dropped == 0, f"the bench's writer dropped {writer.dropped} lines"
    return time.perf_counter() - started, recorder.ticks


def replay_day(d: Path, ticks: int) -> dict[str, object]:
    elapsed_rec, recorded = record_day(d, ticks)
    size = sum(f.stat().st_size for f in trace_files(d))
    started, cpu = time.perf_counter(), time.process_time()
    replay = Replay().run(records(d))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    per_tick = size / recorded
    return {"ticks_replayed": replay.recorded.ticks, "workloads_synthetic": 200,
            "record_s": round(elapsed_rec, 2), "replay_s": round(elapsed, 2),
            "replay_x_real_time": round(replay.recorded.ticks / elapsed, 1),
            "replay_day_s": round(elapsed / replay.recorded.ticks * DAY_S, 1),
            "replay_day_cpu_s": round(cpu / replay.recorded.ticks * DAY_S, 1),
            "ticks_differing": replay.differing,
            "trace_bytes_per_tick_synthetic": round(per_tick, 1),
            "trace_mb_per_day": round(per_tick * DAY_S / 1e6, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ticks", type=int, default=DAY_S, help="synthetic ticks to record and replay (a day)")
    p.add_argument("--rounds", type=int, default=6, help="alternating rounds of real ticks, trace off / on")
    p.add_argument("--tick-samples", type=int, default=40, help="real ticks timed per round and runtime")
    p.add_argument("--workloads", type=int, default=200, help="real cgroups of part 1")
    p.add_argument("--quick", action="store_true", help="CI: 1,200 synthetic ticks, 2 rounds of 10 "
                   "real ticks")
    args = p.parse_args()
    ticks, rounds, samples = (1200, 2, 10) if args.quick else (args.ticks, args.rounds, args.tick_samples)
    try:
        root = RealRoot(prefix="coloc-bench-replay")
    except CgroupsUnavailable as err:
        print(f"bench/replay.py: needs writable cgroups: {err}", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _layout(root, args.workloads)
            real = tick_costs(root, Path(tmp), rounds, samples)
    finally:
        root.cleanup()
    with tempfile.TemporaryDirectory() as tmp:
        day = replay_day(Path(tmp), ticks)
    # the machine's other work: the wall-clock figures are only this machine's when it is idle
    load = float(Path("/proc/loadavg").read_text().split()[0])
    figures = {**real, **day, "quick": args.quick, "load_avg_1m": load, "target_replay_day_s": TARGET_DAY_S,
               "replay_day_target_met": day["replay_day_s"] <= TARGET_DAY_S}  # type: ignore[operator]
    print(f"tick: {real['tick_ms_trace_off']} ms trace off, {real['tick_ms_trace_on']} ms on, CPU "
          f"{real['tick_cpu_ms_trace_off']} / {real['tick_cpu_ms_trace_on']} ms "
          f"({real['workloads_real']} real workloads), recording {real['record_ms_per_tick']} ms on the "
          f"loop's thread; "
          f"trace {real['trace_bytes_per_tick_real']} B/tick real, "
          f"{day['trace_bytes_per_tick_synthetic']} B/tick synthetic ({day['trace_mb_per_day']} MB a day); "
          f"a day replays in {day['replay_day_s']} s ({day['replay_day_cpu_s']} s of CPU; "
          f"{day['replay_x_real_time']}x real time); "
          f"{day['ticks_differing']} ticks differing", flush=True)
    if day["ticks_differing"]:
        print(f"bench/replay.py: {day['ticks_differing']} replayed ticks decided differently from the "
              "recording", file=sys.stderr)
        return 1
    return finish("replay.py", figures, ("tick_ms_trace_off", "tick_ms_trace_on", "replay_day_s",
                                         "trace_bytes_per_tick_synthetic"))


if __name__ == "__main__":
    sys.exit(main())
