"""The executor's last guards on evictions, whatever a policy asked: stale data, HP workloads, in-flight
keys, cool-downs, the token bucket, dry run. The evictor here is a recording one of our own interface
(the real evictors are tested end to end elsewhere)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kit.snapshot import node_snapshot, workload

from agent.executors.apply import ActionExecutor, EvictOutcome
from agent.published import ActionRecord
from cgroups.discovery import Hierarchy
from cgroups.writer import CgroupWriter
from qos.actions import Evict, EvictReason, Hold, HoldReason
from qos.model import NodeSnapshot, Resources, Source, Tier, Workload


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.evicted: list[str] = []
        self.delay = delay

    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        await asyncio.sleep(self.delay)
        self.evicted.append(workload.key)
        return EvictOutcome(True, "recorded")


def _snap(*ws: Workload, stale: dict[str, str] | None = None) -> NodeSnapshot:
    return node_snapshot(ws, capacity=Resources(2000, 1 << 30), cpus=(0, 1), stale=stale or {})


def _executor(tmp_path: Path, rec: Recorder, *, dry_run: bool = False, burst: int = 5,
              audit: list[ActionRecord] | None = None) -> ActionExecutor:
    (tmp_path / "cg").mkdir(exist_ok=True)
    writer = CgroupWriter(Hierarchy.v2(tmp_path), "cg")
    sink = audit.append if audit is not None else (lambda _r: None)
    return ActionExecutor(writer, "besteffort", {Source.LOCAL: rec}, dry_run=dry_run, rate_per_s=0.001,
                          burst=burst, recheck_cooldown_s=60.0, audit=sink, now=0.0, tier_owned=True)


def _evict(key: str) -> Evict:
    return Evict(key, EvictReason.MEMORY_PRESSURE, "test")


async def test_guards(tmp_path: Path) -> None:
    rec = Recorder(delay=0.05)
    audit: list[ActionRecord] = []
    ex = _executor(tmp_path, rec, audit=audit)
    be, hp = workload("local/besteffort/a"), workload("local/hp", be=False, tier=Tier.GUARANTEED)

    ex.execute([_evict(hp.key)], _snap(be, hp))
    assert audit[-1].outcome == "skipped" and "not_best_effort" in audit[-1].reason

    ex.execute([_evict(be.key)], _snap(be, hp, stale={"yarn": "down"}))
    assert audit[-1].outcome == "skipped" and "stale_data" in audit[-1].reason

    ex.execute([_evict("local/besteffort/gone")], _snap(be))
    assert "workload_gone" in audit[-1].reason

    ex.execute([_evict(be.key)], _snap(be))
    assert audit[-1].outcome == "started"
    assert ex.terminating == {be.key}
    ex.execute([_evict(be.key)], _snap(be))
    assert "already_terminating" in audit[-1].reason
    await ex.drain(2)
    assert rec.evicted == [be.key]
    assert audit[-1].outcome == "done"
    ex.execute([_evict(be.key)], _snap(be))
    assert "cooldown" in audit[-1].reason
    assert ex.evictions[("memory_pressure", "local")] == 1
    assert ex.holds[("memory_pressure", "not_best_effort")] == 1


async def test_rate_limit_and_hold_counting(tmp_path: Path) -> None:
    rec = Recorder()
    ex = _executor(tmp_path, rec, burst=2)
    ws = [workload(f"local/besteffort/w{i}") for i in range(4)]
    records = ex.execute([_evict(w.key) for w in ws] + [Hold("p", HoldReason.NO_VICTIM, "why")], _snap(*ws))
    await ex.drain(2)
    assert [r.outcome for r in records] == ["started", "started", "skipped", "skipped"]
    assert "rate_limited" in records[2].reason
    assert sorted(rec.evicted) == ["local/besteffort/w0", "local/besteffort/w1"]
    assert ex.holds[("p", HoldReason.NO_VICTIM)] == 1


def test_holds_are_counted_by_code_and_audited_with_their_words_when_they_begin(tmp_path: Path) -> None:
    audit: list[ActionRecord] = []
    ex = _executor(tmp_path, Recorder(), audit=audit)
    snap = _snap()
    for left in (9.5, 8.5, 7.5):  # one hold, its words changing every tick
        ex.execute([Hold("memory_eviction", HoldReason.COOLDOWN, f"cool-down, {left} s left")], snap)
    ex.execute([], snap)  # it ends
    ex.execute([Hold("memory_eviction", HoldReason.COOLDOWN, "cool-down, 29.5 s left")], snap)  # begins again
    assert ex.holds == {("memory_eviction", HoldReason.COOLDOWN): 4}  # one key, whatever the words
    held = [a for a in audit if a.kind == "hold"]
    assert [(a.policy, a.target, a.outcome, a.reason) for a in held] == [
        ("memory_eviction", "cooldown", "skipped", "cool-down, 9.5 s left"),
        ("memory_eviction", "cooldown", "skipped", "cool-down, 29.5 s left")]


async def test_dry_run_evicts_nothing(tmp_path: Path) -> None:
    rec = Recorder()
    ex = _executor(tmp_path, rec, dry_run=True)
    w = workload("local/besteffort/a")
    records = ex.execute([_evict(w.key)], _snap(w))
    await ex.drain(1)
    assert records[0].outcome == "dry_run"
    assert rec.evicted == []
    assert ex.terminating == frozenset()


class Refusing(Recorder):
    async def evict(self, workload: Workload, action: Evict) -> EvictOutcome:
        self.evicted.append(workload.key)
        return EvictOutcome(False, "429: disruption budget", try_next=True)


async def test_refusal_is_reported_so_the_next_victim_is_taken(tmp_path: Path) -> None:
    rec = Refusing()
    ex = _executor(tmp_path, rec)
    w = workload("local/besteffort/a")
    ex.execute([_evict(w.key)], _snap(w))
    await ex.drain(1)
    refused = sorted(ex.ended().try_next)
    assert refused == [w.key]
    assert ex.eviction_failures["memory_pressure"] == 1
    assert ex.evictions == {}
