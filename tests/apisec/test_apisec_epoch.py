"""Issue 15: one call must not fence every real scheduler out; a corrupt state file must not reset fencing.

Real ledgers with their state files in a temporary directory; the API tests go through a real unix socket.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import grpc
import pytest
from apiseckit import serving, short_dir

from agent.api.client import AgentCallError, AgentClient
from agent.state import AdmitRequest, InvalidRequest, Ledger, LedgerConfig, StaleEpoch
from qos.model import Resources, Source

MAX = (1 << 63) - 1


def _cfg(d: Path, **kw: object) -> LedgerConfig:
    return LedgerConfig(node_id="node-sec", state_path=str(d / "state.json"), **kw)  # type: ignore[arg-type]


def _req(n: int) -> AdmitRequest:
    return AdmitRequest(key=f"local/batch/job-{n}", application_id=f"app-{n}", source=Source.LOCAL,
                        resources=Resources(100, 1 << 20))


async def test_admit_with_epoch_2_63_minus_1_is_refused_and_not_persisted() -> None:
    async with serving(ledger_cfg={"await_scheduler_ack": False}) as s:
        async with AgentClient(s.admin_socket) as c:
            await c.admit(_req(1), 1_000_000)  # refused for capacity or not: the fence is taken first
            assert s.ledger.node.highest_epoch == 1_000_000
            with pytest.raises(AgentCallError) as err:
                await c.admit(_req(2), MAX)
            assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT, err.value
            assert "fence.scheduler_epoch" in err.value.details and "future" in err.value.details
            assert s.ledger.node.highest_epoch == 1_000_000
            await c.admit(_req(3), 1_000_001)  # the real scheduler is not fenced out
            assert s.ledger.node.highest_epoch == 1_000_001
        await s.ledger.flush()
        state = s.dir / "state" / "state.json"
        reopened = Ledger.open(LedgerConfig(node_id="node-sec", state_path=str(state)))
        assert reopened.node.highest_epoch == 1_000_001


def test_an_epoch_may_rise_only_up_to_the_clock_however_many_calls() -> None:
    d = short_dir()
    try:
        ledger = Ledger.open(_cfg(d, epoch_clock_skew_s=60))
        ledger.check_epoch(1000)  # a counter epoch
        now_ms = int(time.time() * 1000)
        ledger.check_epoch(now_ms)  # a timestamp epoch (as `coloc-agent recover` uses)
        with pytest.raises(InvalidRequest, match="at most the current time"):
            ledger.check_epoch(now_ms + 3_600_000)  # an hour in the future
        climbed = now_ms
        for _ in range(100):  # small steps do not add up past the bound either
            try:
                ledger.check_epoch(climbed + 10_000)
                climbed += 10_000
            except InvalidRequest:
                break
        assert climbed <= int(time.time() * 1000) + 60_000
        assert ledger.node.highest_epoch == climbed
        with pytest.raises(StaleEpoch):
            ledger.check_epoch(1000)
        with pytest.raises(ValueError, match="epoch_clock_skew_s"):
            _cfg(d, epoch_clock_skew_s=-1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_epoch_survives_a_corrupt_state_file() -> None:
    d = short_dir()
    try:
        ledger = Ledger.open(_cfg(d))
        ledger.check_epoch(5000)
        ledger.save()
        state = d / "state.json"
        state.write_bytes(state.read_bytes()[:-40] + b"garbage")  # torn / damaged
        reopened = Ledger.open(_cfg(d))
        assert reopened.startup_problem and "moved to" in reopened.startup_problem
        assert list(d.glob("state.json.corrupt-*"))
        assert reopened.node.highest_epoch == 5000
        with pytest.raises(StaleEpoch):
            reopened.check_epoch(4999)
        # Even with the state file gone entirely (not only damaged), fencing is kept.
        state.unlink()
        assert Ledger.open(_cfg(d)).node.highest_epoch == 5000
    finally:
        shutil.rmtree(d, ignore_errors=True)
