"""Recording switched on for a while over the admin socket (`Record`, `coloc-agent record`): a real agent
with its trace off in the config records when asked, stops when the time is up (or when told), the read
socket may not ask, a bad duration is refused naming the field, and what was recorded replays exactly."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import grpc
import pytest
from kit.poll import wait_for
from kit.realcg import RealRoot
from kit.runtime import running, runtime_config

from agent.api.client import AgentCallError, AgentClient
from agent.api.server import start_api_server
from agent.cli.record import main as record_main
from agent.cli.replay import main as replay_main
from agent.config.agent import AgentConfig
from agent.config.api import ApiConfig
from agent.config.trace import TraceConfig
from agent.daemon.runtime import StartError, build
from agent.trace.files import trace_files

pytestmark = [pytest.mark.cgroups, pytest.mark.slow]


async def test_record_for_a_while_over_the_admin_socket(real_root: RealRoot, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    trace_dir = tmp_path / "trace"
    cfg = runtime_config(real_root.name, interval=0.2)
    cfg = dataclasses.replace(cfg, trace=TraceConfig(enabled=False, dir=str(trace_dir)))
    rt = build(cfg)
    assert rt.trace is not None and rt.trace.recorder is None
    api = await start_api_server(rt.ledger, ApiConfig(socket_path=str(tmp_path / "agent.sock")),
                                 trace=rt.trace)
    admin, read = str(tmp_path / "admin.sock"), str(tmp_path / "agent.sock")
    try:
        async with running(rt):
            assert await wait_for(lambda: (p := rt.board.get()) is not None and p.tick >= 3, 10) is not None
            assert not trace_dir.exists(), "the trace was recorded before anyone asked"
            async with AgentClient(read) as c:
                with pytest.raises(AgentCallError) as denied:
                    await c.record(60)
            assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
            async with AgentClient(admin) as c:
                with pytest.raises(AgentCallError) as bad:
                    await c.record(8 * 86_400)
                assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and "seconds" in bad.value.details
                on = await c.record(2)
                assert on.recording and on.until_unix_ms > 0 and on.dir == str(trace_dir)
            await asyncio.sleep(0.8)
            # recording stops by itself once the time is up
            assert await wait_for(lambda: rt.trace is not None and rt.trace.recorder is None, 10) is not None
            ticks = rt.board.get().tick  # type: ignore[union-attr]
            await asyncio.sleep(0.6)
            # and the command: on for a minute, then stopped
            assert await asyncio.to_thread(record_main, ["--minutes", "1", "--socket", admin]) == 0
            assert "recording the trace in" in capsys.readouterr().out
            await asyncio.sleep(0.6)
            assert await asyncio.to_thread(record_main, ["--stop", "--socket", admin]) == 0
            assert "not recording" in capsys.readouterr().out
    finally:
        await api.stop(2.0)
    rt.close()
    files = trace_files(trace_dir)
    assert len(files) == 2, "each recording should be a file of its own"
    assert replay_main([str(files[0]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ticks_differing"] == 0 and out["ticks"] >= 5
    assert out["ticks"] <= ticks, "ticks were recorded after the time was up"


def test_a_trace_dir_that_cannot_be_written_stops_start_up_naming_it(real_root: RealRoot,
                                                                   tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    cfg = runtime_config(real_root.name)
    cfg = dataclasses.replace(cfg, trace=TraceConfig(enabled=True, dir=str(tmp_path / "a-file" / "trace")))
    with pytest.raises(StartError, match=r"^trace\.dir .*a-file/trace: Not a directory"):
        build(cfg)


async def test_record_into_a_dir_that_cannot_be_written_is_refused_naming_it(tmp_path: Path) -> None:
    from agent.state import Ledger, LedgerConfig
    from agent.trace.params import tick_settings
    from agent.trace.switch import TraceSwitch

    (tmp_path / "a-file").write_text("")
    bad = str(tmp_path / "a-file" / "trace")
    settings = tick_settings(AgentConfig(), AgentConfig().policies, io=False)
    switch = TraceSwitch(TraceConfig(dir=bad), lambda: settings, list, "n")
    ledger = Ledger.open(LedgerConfig(node_id="n", state_path=str(tmp_path / "state.json")))
    ledger.start_persistence()
    api = await start_api_server(ledger, ApiConfig(socket_path=str(tmp_path / "agent.sock")), trace=switch)
    try:
        async with AgentClient(str(tmp_path / "admin.sock")) as c:
            with pytest.raises(AgentCallError) as err:
                await c.record(60)
            assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert f"trace.dir {bad}: Not a directory" in err.value.details
            assert not (await c.record(0)).recording
    finally:
        await api.stop(2.0)
        await ledger.close()
    assert switch.recorder is None
