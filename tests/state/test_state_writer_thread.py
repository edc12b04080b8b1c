"""The background writer encodes the state off the event loop (encoding 1,000 allocations took 22 ms on it,
which delayed ticks under API load) and what it writes reads back the same."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import pytest
from statekit import snapshot

import agent.state.persist as persist
from agent.state import AdmitRequest, Ledger, LedgerConfig
from qos.model import Resources, Source


def test_the_writer_encodes_in_its_thread_and_the_file_reads_back(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    encode = persist.encode

    def spy(state: persist.PersistedState) -> bytes:
        threads.append(threading.current_thread().name)
        return encode(state)

    async def run() -> Ledger:
        led = Ledger.open(LedgerConfig(node_id="n", state_path=str(tmp_path / "state.json")))
        monkeypatch.setattr(persist, "encode", spy)
        led.start_persistence()
        led.sync(snapshot([]), Resources(4000, 8 << 30), time.time())
        led.ack_recovery(1, led.revision)
        for i in range(3):
            req = AdmitRequest(f"local/batch/w-{i}", "app", Source.LOCAL, Resources(1, 1), request_id=f"r{i}")
            led.admit(req, 1)
        await led.flush()
        await led.close()
        return led

    led = asyncio.run(run())
    loop_thread = threading.main_thread().name
    assert threads and loop_thread not in threads  # every write after start-up, in the writer's thread
    state = persist.StateStore(tmp_path / "state.json").load("n").state
    assert state is not None and state.highest_epoch == 1
    assert [a.key for a in state.pending_launches] == [f"local/batch/w-{i}" for i in range(3)]
    assert state == dataclasses.replace(led.persisted_state(), saved_at=state.saved_at)
