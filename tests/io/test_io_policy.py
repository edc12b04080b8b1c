"""The BE disk IO policy (`qos.io`) on hand-built snapshots: HP needing the disk cuts BE to the floor at
once, HP idle lifts every cap, HP busy without stalling gets BE more step by step, static caps bound all,
stale readings change nothing, and the eviction of the heaviest BE IO user (off by default). Pure: no
kernel involved."""

from __future__ import annotations

import dataclasses

import pytest
from kit.snapshot import node_snapshot, workload

from qos.actions import Evict, EvictReason, Hold, SetBeIoLimit
from qos.io import IoPolicyConfig, IoState, decide
from qos.model import NO_CAP, DiskSample, IoCap, IoRate, IoSample, NodeSnapshot, Resources, Workload
from qos.policies import PolicyConfig
from qos.registry import build_pipeline

DEV = "254:16"
CFG = IoPolicyConfig()
FLOOR = CFG.floor
BUSY_HP = IoRate(wbps=800_000, wiops=200)
FLOOD = IoRate(wbps=1.5e9, wiops=1500)


def snap(hp: IoRate | None = BUSY_HP, be: IoRate | None = FLOOD, *, stall: float | None = 20.0,
         idle: float | None = 0.0, cap: IoCap | None = NO_CAP, t: float = 100.0, age: float = 0.1,
         static: dict[str, IoCap] | None = None, by: dict[str, IoRate] | None = None,
         workloads: tuple[Workload, ...] = (), stale: dict[str, str] | None = None) -> NodeSnapshot:
    io = IoSample((DiskSample(DEV, hp, be, idle, cap),), stall, static or {}, by or {}, age)
    return node_snapshot(taken_at=t, capacity=Resources(2000, 1 << 30), cpus=(0, 1), io=io,
                         workloads=workloads, stale=stale or {})


def caps(actions: list[object]) -> list[IoCap]:
    return [a.cap for a in actions if isinstance(a, SetBeIoLimit)]


def test_hp_stalling_on_the_disk_cuts_be_to_the_floor_at_once() -> None:
    acts, state = decide(snap(), CFG, IoState())
    assert caps(acts) == [FLOOR]
    (a,) = acts
    assert isinstance(a, SetBeIoLimit) and a.dev == DEV and "waits for IO 20.0%" in a.reason
    assert a.numbers["cap_wbps"] == 10_000_000 and a.numbers["be_bps"] == 1.5e9
    assert state.disks[DEV].cap == FLOOR and state.disks[DEV].needed_since == 100.0
    again, state = decide(snap(cap=FLOOR, t=100.5), CFG, state)  # in force: nothing to do
    assert again == [] and state.disks[DEV].needed_since == 100.0


def test_be_s_reads_and_writes_have_floors_of_their_own() -> None:
    cfg = IoPolicyConfig(floor_mbps=10, floor_iops=400, floor_read_mbps=2, floor_read_iops=50)
    assert cfg.floor == IoCap(rbps=2_000_000, wbps=10_000_000, riops=50, wiops=400)
    acts, _ = decide(snap(be=IoRate(rbps=6e8, riops=600)), cfg, IoState())
    (a,) = acts
    assert isinstance(a, SetBeIoLimit) and a.cap == cfg.floor
    assert a.numbers["cap_rbps"] == 2_000_000 and a.numbers["cap_wbps"] == 10_000_000
    assert a.numbers["cap_riops"] == 50 and a.numbers["cap_wiops"] == 400
    with pytest.raises(ValueError, match=r"io\.policy\.floor_read_mbps: must be in"):
        IoPolicyConfig(floor_read_mbps=0.0)


def test_hp_doing_io_without_waiting_for_it_is_not_a_reason_to_cut() -> None:
    acts, state = decide(snap(stall=1.0), CFG, IoState())
    assert caps(acts) == [] and state.disks[DEV].cap == NO_CAP


def test_without_io_pressure_for_hp_doing_io_is_needing_the_disk() -> None:
    acts, _ = decide(snap(stall=None), CFG, IoState())
    assert caps(acts) == [FLOOR] and "no IO pressure for HP" in acts[0].reason  # type: ignore[union-attr]
    acts, _ = decide(snap(hp=IoRate(), stall=None, idle=5.0), CFG, IoState())
    assert caps(acts) == []


def test_hp_idle_lifts_every_cap_and_not_before_idle_s() -> None:
    state = IoState({DEV: dataclasses.replace(decide(snap(), CFG, IoState())[1].disks[DEV])})
    quiet = IoRate()
    acts, state = decide(snap(hp=quiet, idle=0.3, cap=FLOOR, t=100.3), CFG, state)
    assert caps(acts) == []  # idle 0.3 s < idle_s 0.5 s: HP may be between two IOs
    acts, state = decide(snap(hp=quiet, idle=0.6, cap=FLOOR, t=100.6), CFG, state)
    assert caps(acts) == [NO_CAP] and "no IO on 254:16 for 0.6s" in acts[0].reason  # type: ignore[union-attr]
    assert state.disks[DEV].needed_since is None


def test_hp_busy_without_stall_gets_be_more_every_hold_until_the_cap_no_longer_holds_it() -> None:
    _, state = decide(snap(), CFG, IoState())
    slow_be = IoRate(wbps=9.5e6, wiops=10)  # BE at its floor (10 MB/s)
    acts, state = decide(snap(be=slow_be, stall=1.0, cap=FLOOR, t=101.0), CFG, state)
    assert caps(acts) == []  # calm for 0 s
    acts, state = decide(snap(be=slow_be, stall=1.0, cap=FLOOR, t=102.0), CFG, state)
    assert caps(acts) == []  # 1 s < hold_s
    acts, state = decide(snap(be=slow_be, stall=1.0, cap=FLOOR, t=103.1), CFG, state)
    assert caps(acts) == [FLOOR.scaled(2.0)]
    acts, state = decide(snap(be=IoRate(wbps=19e6, wiops=19), stall=1.0, cap=FLOOR.scaled(2), t=104.0),
                         CFG, state)
    assert caps(acts) == []  # the hold counts from the last change
    acts, state = decide(snap(be=IoRate(wbps=5e6, wiops=5), stall=1.0, cap=FLOOR.scaled(2), t=105.2),
                         CFG, state)
    assert caps(acts) == [NO_CAP]  # BE does a quarter of its 20 MB/s cap: lifted
    acts, state = decide(snap(stall=30.0, t=105.5), CFG, state)
    assert caps(acts) == [FLOOR]  # a stall: back to the floor at once


def test_static_caps_bound_every_cap_and_hold_when_hp_is_idle() -> None:
    static = {DEV: IoCap(wbps=5_000_000)}
    acts, _ = decide(snap(static=static), CFG, IoState())
    assert caps(acts) == [IoCap(2_000_000, 5_000_000, 400, 400)]
    acts, _ = decide(snap(hp=IoRate(), idle=9.0, static=static), CFG, IoState())
    assert caps(acts) == [IoCap(wbps=5_000_000)]  # read back as none: set


def test_a_cap_read_back_otherwise_is_set_again() -> None:
    _, state = decide(snap(), CFG, IoState())
    acts, _ = decide(snap(cap=NO_CAP, t=100.5), CFG, state)
    assert caps(acts) == [FLOOR] and "re-assert" in acts[0].reason  # type: ignore[union-attr]


def test_a_cap_an_earlier_run_left_is_lifted_when_hp_is_idle() -> None:
    acts, _ = decide(snap(hp=IoRate(), idle=None, cap=FLOOR), CFG, IoState())
    assert caps(acts) == [NO_CAP]


def test_stale_or_incomplete_readings_change_nothing() -> None:
    acts, state = decide(snap(age=3.5), CFG, IoState())
    assert caps(acts) == [] and isinstance(acts[0], Hold) and "3.5s old" in acts[0].reason
    assert state == IoState()
    for partial in (snap(hp=None), snap(be=None), snap(cap=None)):
        acts, state = decide(partial, CFG, IoState())
        assert caps(acts) == [] and isinstance(acts[0], Hold) and state.disks == {}


def _be(key: str, *, protected: bool = False) -> Workload:
    return workload(key, be=True, protected=protected)


def test_sustained_need_at_the_floor_evicts_the_heaviest_be_io_user_when_on() -> None:
    cfg = IoPolicyConfig(evict=True, evict_after_s=10.0)
    ws = (_be("k8s/heavy-but-protected", protected=True), _be("k8s/heavy"), _be("k8s/light"))
    by = {"k8s/heavy-but-protected": IoRate(wbps=90e6), "k8s/heavy": IoRate(wbps=15e6),
          "k8s/light": IoRate(rbps=1e6)}
    _, state = decide(snap(workloads=ws, by=by), cfg, IoState())
    acts, state = decide(snap(cap=FLOOR, t=105.0, workloads=ws, by=by), cfg, state)
    assert not any(isinstance(a, Evict) for a in acts)  # 5 s < 10 s
    acts, state = decide(snap(cap=FLOOR, t=110.0, workloads=ws, by=by), cfg, state)
    (ev,) = [a for a in acts if isinstance(a, Evict)]
    assert ev.key == "k8s/heavy" and ev.reason is EvictReason.IO_PRESSURE and "15.0 MB/s" in ev.message
    acts, _ = decide(snap(cap=FLOOR, t=111.0, workloads=ws, by=by), cfg, state)
    assert not any(isinstance(a, Evict) for a in acts)  # one round per evict_after_s
    acts, _ = decide(snap(cap=FLOOR, t=110.0, workloads=ws, by=by), CFG, state)
    assert not any(isinstance(a, Evict) for a in acts)  # off by default
    acts, _ = decide(snap(cap=FLOOR, t=110.0, workloads=ws, by=by, stale={"kubelet": "timeout"}), cfg,
                     dataclasses.replace(state, evicted_at=None))
    assert not any(isinstance(a, Evict) for a in acts)
    assert any(isinstance(a, Hold) and "stale" in a.reason for a in acts)


def test_the_pipeline_runs_the_io_policy_only_when_configured() -> None:
    assert "io" not in [p.name for p in build_pipeline(PolicyConfig()).policies]
    pipeline = build_pipeline(PolicyConfig(), io=CFG)
    assert pipeline.policies[-1].name == "io"
    actions, _ = pipeline.decide(snap(), pipeline.initial_state())
    assert caps(actions) == [FLOOR]


def test_the_config_is_checked_by_name() -> None:
    with pytest.raises(ValueError, match=r"io\.policy\.floor_mbps: must be in"):
        IoPolicyConfig(floor_mbps=0.0)
    with pytest.raises(ValueError, match=r"io\.policy\.evict"):
        IoPolicyConfig(evict="yes")  # type: ignore[arg-type]
