"""The trace's encoding, files and command on hand-built inputs: what decodes is what was encoded, files
rotate and are capped, a cut file reads up to its last whole record, and bad input is one line naming what is
wrong."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from kit.snapshot import node_snapshot, workload

from agent.cli.replay import main as replay_main
from agent.config.agent import AgentConfig
from agent.config.load import ConfigError
from agent.config.trace import TraceConfig
from agent.trace.codec import (
    TraceError,
    WorkloadReader,
    WorkloadTable,
    decode,
    encode,
    snapshot_of,
    snapshot_rest,
)
from agent.trace.files import MAGIC, TraceWriter, read_lines, trace_files
from agent.trace.params import tick_settings
from qos.actions import Evict, EvictReason, Hold, HoldReason, SetBeCpuQuota
from qos.model import BeTierState, DiskSample, DrainTerms, DrainView, IoCap, IoRate, IoSample, Usage

GIB = 1 << 30


def _snapshot() -> object:
    ws = [workload(f"k8s/be-{i}", cpu=10.5 * i, mem=i * GIB // 7, request_cpu=100, priority=3000 + i)
          for i in range(5)]
    ws.append(workload("local/hp", be=False, cpu=None, mem=None, terminating=True, pids=3))
    io = IoSample(disks=(DiskSample("8:0", IoRate(1.5, 2.0, 3.0, 4.0), None, 0.25, IoCap(rbps=10_000_000)),),
                  hp_stall_percent=12.5, static={"8:0": IoCap(wiops=50)},
                  by_workload={"k8s/be-1": IoRate(1.0)}, notes=("a note",))
    return node_snapshot(ws, taken_at=1_700_000_000.123456, hp=Usage(1234.5678, 3 * GIB, 0.01),
                         be_tier=BeTierState(cpuset=(1, 2), quota_milli_cpu=None, cpu_idle=True),
                         stale={"yarn": "no answer"}, io=io, hp_cpu_pressure_some_avg10=float("nan"),
                         drain=DrainView(DrainTerms(deadline=None), now=5.0, finished=frozenset({"a", "b"})))


def test_a_snapshot_decodes_to_an_equal_one() -> None:
    snap = _snapshot()
    table, reader = WorkloadTable(), WorkloadReader()
    defs, rows = table.rows(snap.workloads)  # type: ignore[attr-defined]
    wire = json.loads(json.dumps({"defs": defs, "rows": rows, "rest": snapshot_rest(snap)}))  # type: ignore
    back = snapshot_of(wire["rest"], reader.workloads(wire["defs"], wire["rows"]))
    nan = back.hp_cpu_pressure_some_avg10
    assert nan != nan  # NaN survives
    assert back.workloads == snap.workloads  # type: ignore[attr-defined]
    import dataclasses
    assert dataclasses.replace(back, hp_cpu_pressure_some_avg10=0.0) == dataclasses.replace(
        snap, hp_cpu_pressure_some_avg10=0.0)  # type: ignore[type-var]
    # the next tick defines nothing new, and an unchanged workload is the same object again
    defs2, rows2 = table.rows(snap.workloads)  # type: ignore[attr-defined]
    assert defs2 == []
    again = reader.workloads(defs2, json.loads(json.dumps(rows2)))
    assert all(a is b for a, b in zip(again, back.workloads, strict=True))


def test_actions_and_settings_round_trip() -> None:
    actions = [Evict("k8s/x", EvictReason.MEMORY_PRESSURE, "why", 1, 2, {"n": 0.1}),
               Hold("p", HoldReason.STALE_DATA, "stale"), SetBeCpuQuota(None, "r", {"a": 1.0})]
    assert decode(json.loads(json.dumps(encode(actions)))) == actions
    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=True)
    assert decode(json.loads(json.dumps(encode(settings)))) == settings


def test_a_trace_names_only_the_agents_own_classes() -> None:
    with pytest.raises(TraceError, match="not one a trace may name"):
        decode({"@": "os.system", "t": ["true"]})
    with pytest.raises(TraceError, match="not known"):
        decode({"@": "qos.model.NoSuchThing", "v": {}})


def test_files_rotate_are_capped_and_a_cut_file_reads_to_its_last_whole_line(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, file_bytes=200, files=3, queue_lines=1000)
    for i in range(40):
        w.put(json.dumps({"k": "head" if i % 5 == 0 else "tick", "i": i, "pad": "x" * 50}).encode(),
              new_file=i % 5 == 0)
    w.close()
    files = trace_files(tmp_path)
    assert [f.name for f in files] == ["trace-000005.ctr", "trace-000006.ctr", "trace-000007.ctr"]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files), "a trace file others may read"
    lines = [json.loads(x)["i"] for x in read_lines(files[-1])]
    assert lines == [35, 36, 37, 38, 39]
    # a file still being written: its last record cut short is left out, the rest read
    raw = files[-1].read_bytes()
    dec = zlib.decompressobj().decompress(raw[len(MAGIC):])
    cut = tmp_path / "trace-000100.ctr"
    comp = zlib.compressobj()
    cut.write_bytes(MAGIC + comp.compress(dec[:-10]) + comp.flush(zlib.Z_SYNC_FLUSH))
    assert [json.loads(x)["i"] for x in read_lines(cut)] == [35, 36, 37, 38]
    # a new writer in the same directory goes on after the last file
    w2 = TraceWriter(tmp_path, file_bytes=200, files=3, queue_lines=10)
    w2.put(b'{"k":"head"}', new_file=True)
    w2.close()
    assert trace_files(tmp_path)[-1].name == "trace-000101.ctr"


def test_the_trace_is_off_by_default_and_its_dir_must_be_absolute() -> None:
    assert AgentConfig().trace.enabled is False
    with pytest.raises(ConfigError, match=r"trace\.dir: must be absolute"):
        TraceConfig(enabled=True, dir="trace")


@pytest.mark.parametrize(("args", "error"), [
    (["{missing}"], "cannot read"),
    (["{not_trace}"], "not a coloc-agent trace file"),
    (["{empty_dir}"], "no trace files"),
])
def test_bad_traces_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        args: list[str], error: str) -> None:
    (tmp_path / "not-a-trace").write_text("hello\n")
    (tmp_path / "empty").mkdir()
    paths = {"missing": tmp_path / "nope.ctr", "not_trace": tmp_path / "not-a-trace",
             "empty_dir": tmp_path / "empty"}
    assert replay_main([a.format(**paths) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert error in err and "\n" not in err


def _tiny_trace(tmp_path: Path) -> Path:
    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    pipeline = settings.pipeline()
    w = TraceWriter(tmp_path, file_bytes=1 << 20, files=2, queue_lines=10)
    w.put(json.dumps({"k": "head", "v": 1, "node": "n", "tick": 1, "at": 0.0, "settings": encode(settings),
                      "state": encode(pipeline.initial_state())}).encode(), new_file=True)
    w.close()
    return tmp_path


@pytest.mark.parametrize(("setting", "error"), [
    ("nonsense=1", "not a setting a replay can change"),
    ("policies.suppression.no_such=1", "no such setting"),
    ("policies.suppression.threshold_percent=abc", "expected float"),
    ("policies.suppression.threshold_percent=500", "threshold_percent"),
    ("io.policy.floor_mbps=5", "recorded with io.policy off"),
    ("eviction.burst=0", "must be > 0"),
    ("justakey", "expected KEY=VALUE"),
])
def test_bad_settings_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str,
                                          error: str) -> None:
    trace = _tiny_trace(tmp_path)
    assert replay_main([str(trace), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert error in err and "\n" not in err, err


def test_a_trace_of_no_tick_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main([str(_tiny_trace(tmp_path))]) == 2
    assert "no complete tick" in capsys.readouterr().err


def test_the_replays_quick_workload_builder_makes_what_the_constructor_makes() -> None:
    from agent.trace import codec
    w = workload("yarn/container_e01_1700000000000_0001_01_000002", cpu=1.5, mem=7, priority=42, pids=9,
                 app_id="application_1700000000000_0001", seq=2, started_at=3.5, namespace="ns")
    parts = codec._parts(codec._definition(codec._static(w)))
    assert codec._build is not codec._slow_build, "the quick builder is not in use"
    quick = codec._build(parts, w.usage, w.sample_age_s)
    assert quick == w == codec._slow_build(parts, w.usage, w.sample_age_s)


def _synthetic(d: Path, *, skip: int | None = None, claimed: object = None) -> None:
    """Twelve ticks of a node whose HP load moves, recorded as the loop records them; `skip`: a tick that runs
    but is not recorded; `claimed`: settings the trace says it ran with (the ones it ran with otherwise)."""
    from agent.trace.recorder import TickRecorder, TickTrace
    from qos.model import Resources

    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    pipeline = settings.pipeline()
    writer = TraceWriter(d, file_bytes=1 << 20, files=10, queue_lines=100)
    recorder = TickRecorder(writer, lambda: claimed or settings, list, "n")  # type: ignore[return-value]
    state = pipeline.initial_state()
    for n in range(1, 13):
        hp = 2000.0 + 1500.0 * (n % 4)  # HP's load moves: suppression's budget moves with it
        snap = node_snapshot([workload("k8s/be", cpu=500.0, mem=GIB), workload("local/hp", be=False, cpu=hp)],
                             taken_at=1000.0 + n, capacity=Resources(16000, 64 * GIB),
                             node=Usage(hp + 700, 4 * GIB), hp=Usage(hp, GIB), be=Usage(500.0, GIB),
                             system=Usage(200.0, GIB))
        decision = pipeline.decide(snap, state)
        if n != skip:
            recorder.record(TickTrace(n, 1000.0 + n, state, (), (), snap, decision, [], set()))
        state = decision.state
    writer.close()


def test_a_tick_missing_from_the_trace_begins_a_new_file_and_the_replay_stays_exact(tmp_path: Path) -> None:
    """A tick that failed half-way (or one the recorder never got) moved the policies' state unrecorded: the
    next recorded tick begins a new file whose header carries the state, so the replay does not drift."""
    from agent.trace.replay import Replay, records

    _synthetic(tmp_path, skip=6)
    assert len(trace_files(tmp_path)) == 2
    replay = Replay().run(records(tmp_path))
    assert replay.recorded.ticks == 11 and replay.restarts == 1
    assert replay.differing == 0, replay.first_difference


def test_a_trace_that_does_not_replay_exactly_fails_the_command(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Settings the trace does not hold (here: it claims a threshold the agent did not run with) make the
    recorded settings decide differently: exit 1, the first differing tick in the JSON."""
    import dataclasses

    ran = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    suppression = dataclasses.replace(ran.policies.suppression, threshold_percent=30.0)
    _synthetic(tmp_path, claimed=dataclasses.replace(ran, policies=dataclasses.replace(
        ran.policies, suppression=suppression)))
    assert replay_main([str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ticks_differing"] > 0 and out["first_difference"]["tick"] >= 1


def test_a_config_file_and_sets_change_the_replays_settings(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace"
    _synthetic(trace)
    cfg = tmp_path / "lower.yaml"
    cfg.write_text("policies:\n  suppression:\n    threshold_percent: 40\n")
    assert replay_main([str(trace), "--json", "--config", str(cfg)]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert replay_main([str(trace), "--json", "--set", "policies.suppression.threshold_percent=40"]) == 0
    by_set = json.loads(capsys.readouterr().out)
    for out in (by_file, by_set):
        assert out["ticks_differing"] > 0
        assert out["replayed"]["be_budget_mean_milli"] < out["recorded"]["be_budget_mean_milli"]
    assert by_file["replayed"] == by_set["replayed"]
    assert by_file["changes"] == [f"config {cfg}"]
    (tmp_path / "bad.yaml").write_text("policies:\n  suppression:\n    threshold_percent: 400\n")
    assert replay_main([str(trace), "--config", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "threshold_percent" in err and "\n" not in err


def test_a_damaged_record_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good"
    _synthetic(good)
    lines = list(read_lines(trace_files(good)[0]))
    tick = json.loads(lines[3])
    del tick["end"]
    bad = tmp_path / "bad"
    w = TraceWriter(bad, file_bytes=1 << 20, files=2, queue_lines=100)
    for i, line in enumerate(lines):
        w.put(json.dumps(tick).encode() if i == 3 else line, new_file=i == 0)
    w.close()
    assert replay_main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "record 3 ('tick', tick 3) cannot be replayed: KeyError" in err and "\n" not in err, err


def test_the_switch_records_for_the_time_asked_and_a_configured_trace_goes_on(tmp_path: Path) -> None:
    from agent.trace.recorder import TickTrace
    from agent.trace.switch import TraceSwitch

    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    pipeline = settings.pipeline()
    now = [1000.0]
    snap = node_snapshot([workload("k8s/be", cpu=1.0, mem=1)], taken_at=1000.0)
    decision = pipeline.decide(snap, pipeline.initial_state())

    def tick(switch: TraceSwitch, n: int) -> None:
        switch.record(TickTrace(n, now[0], pipeline.initial_state(), (), (), snap, decision, [], set()))

    asked = TraceSwitch(TraceConfig(dir=str(tmp_path / "asked")), lambda: settings, list, "n",
                        clock=lambda: now[0])
    state = asked.start(asked.open_writer(), 30.0)
    assert state.on and state.until == 1030.0
    tick(asked, 1)
    now[0] = 1029.0
    tick(asked, 2)
    assert asked.state().ticks == 2
    now[0] = 1030.0
    tick(asked, 3)  # the time is up: this tick is not recorded, and the files are closed (on a thread)
    assert asked.recorder is None and not asked.state().on

    kept = TraceSwitch(TraceConfig(enabled=True, dir=str(tmp_path / "kept")), lambda: settings, list, "n",
                       clock=lambda: now[0])
    kept.start(kept.open_writer(), None)
    kept.start(None, 5.0)  # asking for a while does not end a trace the config turns on
    kept.stop()
    now[0] = 5000.0
    tick(kept, 1)
    assert kept.recorder is not None and kept.state().on and kept.state().until is None
    kept.close()
    from agent.trace.replay import records
    assert [r["k"] for r in records(tmp_path / "kept")] == ["head", "tick"]
