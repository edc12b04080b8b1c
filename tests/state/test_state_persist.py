"""Persistence of what the ledger cannot re-derive: atomic writes, read-back, corrupt files set aside."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest
from statekit import snapshot, yarn

from agent.state import (
    AdmitRequest,
    DrainPhase,
    DrainStatus,
    Ledger,
    LedgerConfig,
    Lifecycle,
    Phase,
    StateFileError,
    Trigger,
)
from agent.state.persist import PersistedState, StateStore, decode, encode
from qos.model import Resources, Source

BATCH = Resources(4000, 8 << 30)
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def cfg(path: Path, node: str = "node-a", **kw: object) -> LedgerConfig:
    return LedgerConfig(node_id=node, state_path=str(path), **kw)  # type: ignore[arg-type]


def admit(ledger: Ledger, seq: int, epoch: int = 1) -> str:
    key = f"yarn/container_e01_1700000000000_0009_01_{seq + 1:06d}"
    res = ledger.admit(
        AdmitRequest(
            key, "application_1700000000000_0009", Source.YARN, Resources(10, 10), request_id=f"r{seq}"
        ),
        epoch,
    )
    assert res.accepted
    return key


def open_schedulable(path: Path, epoch: int = 1) -> Ledger:
    led = Ledger.open(cfg(path))
    led.sync(snapshot([]), BATCH, time.time())
    led.ack_recovery(epoch, led.revision)
    return led


def test_restart_restores_pending_launches_epoch_and_history(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    led = open_schedulable(path, epoch=4)
    first = led.identity.incarnation
    keys = [admit(led, n, epoch=4) for n in range(3)]
    led.sync(snapshot([yarn(8, 1)]), BATCH, time.time())  # a source-derived allocation: not persisted
    led.save()

    again = Ledger.open(cfg(path))
    assert again.identity.incarnation != first and again.identity.restarts == 1
    assert again.node.highest_epoch == 4
    assert again.node.lifecycle is Lifecycle.RECOVERING  # a new incarnation waits for a scheduler's ack
    pending = [a for a in again.view().allocations if a.phase is Phase.PENDING_LAUNCH]
    assert sorted(a.key for a in pending) == keys
    assert all(a.request_id.startswith("r") and a.scheduler_epoch == 4 for a in pending)
    assert again.startup_problem is None
    # Restored launches are events of the new incarnation: a watcher from revision 0 sees them.
    assert [e.reason for e in again.events_after(0)][:4] == ["", "restored", "restored", "restored"]


def test_incarnation_history_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    seen = []
    for _ in range(6):
        led = Ledger.open(cfg(path, incarnation_history=4))
        seen.append(led.identity.incarnation)
    state = StateStore(path).load("node-a").state
    assert state is not None
    assert [i.incarnation for i in state.incarnations] == seen[-4:]


def test_drain_survives_restart_with_absolute_deadline(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    led = open_schedulable(path)
    drain = DrainStatus(
        phase=DrainPhase.WAIT_ALLOCATIONS,
        deadline=1_900_000_000.5,
        started_at=1_800_000_000.0,
        previous_batch_allocatable=BATCH,
        request_id="drain-1",
        reason="kernel upgrade",
    )
    led.transition(Trigger.DRAIN, 2, drain=drain, request_id="drain-1")
    led.save()
    again = Ledger.open(cfg(path))
    assert again.node.lifecycle is Lifecycle.DECOMMISSIONING
    assert again.node.drain == drain
    assert again.seen_request("drain-1") and not again.seen_request("drain-2")


@pytest.mark.parametrize(
    "damage", ["truncate", "flip", "empty", "garbage", "foreign", "directory", "version"]
)
def test_corrupt_state_is_reported_and_set_aside(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "state.json"
    led = open_schedulable(path)
    admit(led, 1)
    led.save()
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        i = data.index(b'"highest_epoch":1')
        path.write_bytes(data[:i] + data[i:].replace(b"1", b"7", 1))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(os.urandom(300))
    elif damage == "foreign":
        Ledger.open(cfg(tmp_path / "other.json", node="node-b")).save()
        os.replace(tmp_path / "other.json", path)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "version":
        env = json.loads(data)
        env["version"] = 99
        path.write_text(json.dumps(env))

    again = Ledger.open(cfg(path))  # never raises: a crash loop is worse than a fresh start
    assert again.startup_problem is not None and "moved to state.json.corrupt-" in again.startup_problem
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1
    assert again.view().allocations == ()
    assert path.is_file()  # the fresh state was written in its place
    notices = [
        e for e in again.events_after(0) if e.reason == "" and getattr(e.obj, "kind", "") == "state_file"
    ]
    assert len(notices) == 1
    expected = {
        "truncate": "not valid JSON",
        "flip": "checksum",
        "empty": "not valid JSON",
        "garbage": "not valid JSON",
        "foreign": "belongs to node 'node-b'",
        "directory": "directory",
        "version": "version",
    }[damage]
    assert expected in again.startup_problem


def test_encode_decode_round_trip_and_field_errors() -> None:
    led = Ledger(LedgerConfig(node_id="n", state_path=None), boot_id="b")
    led.sync(snapshot([]), BATCH, 0.0)
    led.ack_recovery(3, led.revision)
    admit(led, 5, epoch=3)
    state = led.persisted_state()
    assert decode(encode(state)) == state
    env = json.loads(encode(state))
    env["state"]["pending_launches"][0]["resources"]["milli_cpu"] = "ten"
    body = json.dumps(env["state"], sort_keys=True, separators=(",", ":")).encode()
    import hashlib

    env["sha256"] = hashlib.sha256(body).hexdigest()
    from agent.state.persist import CorruptState

    with pytest.raises(CorruptState, match=r"pending_launches\[0\]\.resources\.milli_cpu: expected int"):
        decode(json.dumps(env).encode())


def test_write_failure_is_an_error_not_silence(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StateFileError, match="state directory"):
        StateStore(blocker / "state.json").load("n")
    store = StateStore(tmp_path / "state.json")
    store.prepare()
    (tmp_path / "state.json").mkdir()
    (tmp_path / "state.json" / "keep").write_text("x")  # rename over a non-empty directory fails
    with pytest.raises(StateFileError, match="cannot write"):
        store.write(PersistedState(node_id="n"))
    assert not list(tmp_path.glob(".state.json.tmp-*"))  # no temporary file left behind


async def test_group_commit_writer_makes_admissions_durable(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    led = open_schedulable(path)
    led.start_persistence()
    keys = [admit(led, n) for n in range(50)]
    await led.flush()
    assert (
        sorted(a.key for a in (StateStore(path).load("node-a").state or PersistedState("x")).pending_launches)
        == keys
    )
    assert led._writer is not None and led._writer.writes <= 3  # fifty changes, coalesced
    assert not led.unsaved_changes
    await led.close()


class Run:
    """What one writer run reported before it was killed."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] | None = None
        self.durable: dict[str, int] = {}

    def read_until(self, stream: IO[str], stop: str) -> None:
        for line in stream:
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "LOADED":
                self.loaded = json.loads(rest)
            elif word == "DURABLE":
                assert len(rest.split()) == 2, f"garbled line {line!r}"
                k, e = rest.split()
                self.durable[k] = int(e)
            elif word == "EXIT":
                assert int(rest.split()[1]) == signal.SIGKILL, f"writer died by itself: {rest}"
                return
            else:
                pytest.fail(f"unexpected output from the writer: {line!r}")
            if word == stop:
                return


def test_sigkill_during_writes_never_loses_a_durable_launch(tmp_path: Path) -> None:
    """SIGKILL the writer process at random points, 120 times; every start must read a valid state (or set a
    deliberately damaged one aside) and still hold every launch it had reported durable."""
    path = tmp_path / "state.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    zygote = subprocess.Popen(
        [sys.executable, "-S", str(HERE / "persist_proc.py"), str(path), "node-crash"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        bufsize=1,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    rng = random.Random(4)
    durable: dict[str, int] = {}
    seq = 0
    loads = corrupted = killed_before_load = checked = mid_write = 0
    try:
        # At least 120 kills; more (up to 400) until 10 of them have landed inside a write and more than
        # 1,000 durable launches have been checked after a kill: both a matter of timing on a busy machine
        # (beside two CPU hogs, 120 kills checked 925).
        for n in range(400):
            if n >= 120 and mid_write >= 10 and checked > 1000:
                break
            damaged = n % 15 == 7
            if damaged and path.exists():
                data = path.read_bytes()
                path.write_bytes(data[: rng.randrange(1, len(data))])
                corrupted += 1
            mid_write += bool(list(tmp_path.glob(".state.json.tmp-*")))  # the last kill hit a write
            zygote.stdin.write(f"RUN {seq}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline().split()[1])
            run = Run()
            # Mostly kill while admissions are being written; sometimes anywhere, start-up included.
            if damaged or rng.random() < 0.8:
                run.read_until(zygote.stdout, "LOADED")
            time.sleep(rng.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
            run.read_until(zygote.stdout, "EXIT")
            loaded, pending_durable = run.loaded, run.durable
            seq += 1000
            if loaded is None:
                killed_before_load += 1
                continue
            loads += 1
            if damaged:
                assert loaded["problem"] and "moved to" in loaded["problem"]
                durable.clear()  # we destroyed them ourselves
                durable.update(pending_durable)
                continue
            assert loaded["problem"] is None, loaded["problem"]
            missing = set(durable) - set(loaded["pending"])
            assert not missing, f"run {n}: durable launches lost: {sorted(missing)[:5]}"
            checked += len(durable)
            assert loaded["highest_epoch"] >= max(durable.values(), default=0)
            durable.update(pending_durable)
    finally:
        zygote.kill()
        zygote.wait()
    final = StateStore(path).load("node-crash")
    assert final.problem is None and final.state is not None
    assert set(durable) <= {a.key for a in final.state.pending_launches}
    assert not list(tmp_path.glob(".state.json.tmp-*"))
    assert loads >= 80 and corrupted >= 7
    assert checked > 1000  # launches verified present after a kill, summed over runs
    assert mid_write >= 10, f"only {mid_write} kills landed inside a write"


def test_admitted_allocation_keeps_its_scheduler_facts_after_it_started_and_a_restart(tmp_path: Path) -> None:
    """A bare cgroup says nothing about the application or the resources the scheduler admitted: once the
    allocation runs, a restart must still know them."""
    from qos.model import Tier, Workload

    path = tmp_path / "state.json"
    led = open_schedulable(path, epoch=2)
    res = led.admit(AdmitRequest("local/besteffort/job1", "app-42", Source.LOCAL, Resources(500, 1 << 30),
                                 request_id="req-42"), 2)
    assert res.accepted
    bare = Workload(key="local/besteffort/job1", name="job1", source=Source.LOCAL, tier=Tier.BESTEFFORT,
                    be=True, priority=3000, cgroup="besteffort/job1")
    led.sync(snapshot([bare]), BATCH, time.time())
    assert led.allocation("local/besteffort/job1").phase is Phase.RUNNING
    led.save()

    again = Ledger.open(cfg(path))
    again.sync(snapshot([bare]), BATCH, time.time())
    a = again.allocation("local/besteffort/job1")
    assert a is not None and a.phase is Phase.RUNNING
    assert (a.application_id, a.resources, a.scheduler_epoch, a.request_id) == (
        "app-42", Resources(500, 1 << 30), 2, "req-42")
