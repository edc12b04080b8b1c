"""End to end on real cgroups and real processes: memory eviction, dry run, and the stale-data guard.

The private root is the "node"; its memory capacity is set from what the test's processes really use, so
the pressure is real working set measured by the kernel against the configured capacity.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from kit.poll import still, until, wait_for
from kit.realcg import RealRoot, alive
from kit.runtime import running, runtime_config

from agent.config.sources import NodeManagerConfig
from agent.config.standalone import LocalWorkload
from agent.daemon.runtime import build
from agent.demo.spawn import workload_argv
from cgroups.reader import CgroupReader
from qos.actions import HoldReason

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]

MIB = 1 << 20


def _hold(real_root: RealRoot, rel: str, mib: int) -> int:
    real_root.mkcg(rel)
    return real_root.spawn(rel, workload_argv("hog", mib, 0.05, mib)).pid


async def _settle(real_root: RealRoot, rels: list[str], mib: dict[str, int]) -> dict[str, int]:
    """Wait until every holder has its memory; return each one's working set ("" = the root)."""
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    try:
        def ready() -> bool:
            return all((reader.sample(r).memory_working_set_bytes or 0) >= mib[r] * MIB for r in rels)

        assert await wait_for(ready, 20, poll=0.05) is not None, "memory holders never got their memory"
        return {r: reader.sample(r).memory_working_set_bytes or 0 for r in ["", *rels]}
    finally:
        reader.close()


def _layout(real_root: RealRoot) -> tuple[dict[str, int], dict[str, int]]:
    mib = {"besteffort/low-small": 40, "besteffort/low-big": 200, "besteffort/high": 60, "hp": 60}
    pids = {rel: _hold(real_root, rel, m) for rel, m in mib.items()}
    return mib, pids


PRIORITIES = (LocalWorkload("besteffort/low-small", priority=3000),
              LocalWorkload("besteffort/low-big", priority=3500),
              LocalWorkload("besteffort/high", priority=5000))


async def test_memory_pressure_evicts_just_enough_lowest_priority_first(real_root: RealRoot,
                                                                        tmp_path: Path) -> None:
    mib, pids = _layout(real_root)
    ws = await _settle(real_root, list(mib), mib)
    # A capacity at which reaching 68 % needs more than low-small holds but less than low-small and
    # half of low-big: exactly those two must go, and nothing else.
    need = ws["besteffort/low-small"] + ws["besteffort/low-big"] // 2
    capacity = int((ws[""] - need) / 0.68)
    assert ws[""] / capacity >= 0.7
    audit = tmp_path / "audit.jsonl"
    rt = build(runtime_config(real_root.name, memory=capacity, interval=0.5, workloads=PRIORITIES,
                              audit=str(audit)))
    async with running(rt):
        gone = await wait_for(lambda: not alive(pids["besteffort/low-big"]), 15, poll=0.05)
        assert gone is not None, "nothing was evicted"
        # a further round would happen here if it over-evicted
        assert await still(lambda: alive(pids["besteffort/high"]) and alive(pids["hp"]), 2.0)
    assert not alive(pids["besteffort/low-small"])
    assert not alive(pids["besteffort/low-big"])
    assert alive(pids["besteffort/high"]), "evicted more than needed"
    assert alive(pids["hp"]), "an HP workload was touched"
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    evicts = [r for r in records if r["kind"] == "evict" and r["outcome"] == "started"]
    assert [r["target"] for r in evicts] == ["local/besteffort/low-small", "local/besteffort/low-big"]
    assert all(r["policy"] == "memory_pressure" for r in evicts)
    assert evicts[0]["numbers"], "an eviction must carry the numbers that caused it"


async def test_dry_run_changes_nothing_on_disk(real_root: RealRoot, tmp_path: Path) -> None:
    mib, pids = _layout(real_root)
    ws = await _settle(real_root, list(mib), mib)
    audit = tmp_path / "audit.jsonl"
    rt = build(runtime_config(real_root.name, memory=int(ws[""] / 0.75), interval=0.3, workloads=PRIORITIES,
                              dry_run=True, audit=str(audit)))

    def knob_values() -> dict[str, str]:
        return {f: (real_root.path(c, "besteffort") / f).read_text()
                for c, f in (("cpuset", "cpuset.cpus"), ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.idle"),
                             ("memory", "memory.soft_limit_in_bytes"))}

    knobs = knob_values()
    async with running(rt):
        assert await still(lambda: knob_values() == knobs and all(alive(p) for p in pids.values()), 3.0)
    after = knob_values()
    assert after == knobs
    assert all(alive(p) for p in pids.values())
    outcomes = {(r["kind"], r["outcome"]) for r in map(json.loads, audit.read_text().splitlines())}
    assert ("evict", "dry_run") in outcomes, f"dry run should still record what it would do: {outcomes}"
    assert not {o for k, o in outcomes if o in ("applied", "started", "done")}


async def test_no_eviction_on_stale_data(real_root: RealRoot, tmp_path: Path) -> None:
    """A NodeManager that is configured but not answering makes the data stale: memory is over the
    threshold, yet nothing is evicted, and the hold says why."""
    mib, pids = _layout(real_root)
    ws = await _settle(real_root, list(mib), mib)
    cfg = runtime_config(real_root.name, memory=int(ws[""] / 0.75), interval=0.3, workloads=PRIORITIES)
    # A NodeManager that is configured but not there (nothing listens on port 1).
    nm = NodeManagerConfig(enabled=True, url="http://127.0.0.1:1", timeout_s=0.5, resync_s=0.5,
                           stale_after_s=1.0)
    cfg = replace(cfg, sources=replace(cfg.sources, yarn=nm))
    rt = build(cfg)
    started = time.monotonic()
    async with running(rt):
        stop = asyncio.Event()
        refresh = asyncio.create_task(rt.sources.run(stop))
        assert await still(lambda: all(alive(p) for p in pids.values()), 2.5)
        assert await until(lambda: (p := rt.board.get()) is not None and p.tick >= 3, 10)
        stop.set()
        await refresh
        pub = rt.board.get()
    assert pub is not None and pub.tick >= 3
    assert all(alive(p) for p in pids.values())
    holds = pub.counters.holds
    assert "yarn" in pub.snapshot.stale
    assert any(code in (HoldReason.STALE_DATA, HoldReason.UNSAFE_DATA) for (_p, code) in holds), holds
    assert time.monotonic() - started < 30
