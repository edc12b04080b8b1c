"""A process that only exercises the ledger's persistence, for the crash-consistency test.

    python persist_proc.py STATE_PATH NODE_ID

reads commands on stdin: `RUN <first seq>` forks a writer (so each run skips interpreter start-up) and
prints `PID <pid>`; when the writer dies (the test SIGKILLs it) it prints `EXIT <pid> <status>`.
The writer opens the ledger from STATE_PATH (as the agent does at start), prints one `LOADED <json>` line
with what it read, then admits launches as fast as it can from four concurrent tasks (group commit),
raising the scheduler epoch now and then, and prints `DURABLE <key> <epoch>` only after the ledger's flush
returned. It runs until it is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback

from agent.state import AdmitRequest, Ledger, LedgerConfig
from qos.model import NodeSnapshot, Resources, Source, Usage

BIG = Resources(1 << 40, 1 << 60)


def say(line: str) -> None:
    """One write(2) per line: a SIGKILL cannot leave half a line for the test to misread."""
    os.write(1, (line + "\n").encode())


def key(seq: int) -> str:
    return f"yarn/container_e01_1700000000000_{1 + seq // 1000:04d}_01_{seq + 1:06d}"


def app(seq: int) -> str:
    return f"application_1700000000000_{1 + seq // 1000:04d}"


async def main(path: str, node_id: str, first: int) -> None:
    ledger = Ledger.open(LedgerConfig(node_id=node_id, state_path=path, pending_launch_ttl_s=1e9))
    view = ledger.view()
    say(
        "LOADED "
        + json.dumps(
            {
                "problem": ledger.startup_problem,
                "pending": sorted(a.key for a in view.allocations),
                "highest_epoch": view.node.highest_epoch,
                "restarts": view.identity.restarts,
                "incarnation": view.identity.incarnation,
            }
        )
    )
    ledger.start_persistence()
    empty = NodeSnapshot(
        taken_at=0.0,
        capacity=BIG,
        cpus=(0,),
        node_usage=Usage(),
        hp_usage=Usage(),
        be_usage=Usage(),
        system_usage=Usage(),
        workloads=(),
    )
    ledger.sync(empty, BIG, 0.0)
    epoch = max(1, view.node.highest_epoch)
    ledger.ack_recovery(epoch, ledger.revision)
    counter = iter(range(first, 10**9))

    async def admitter() -> None:
        nonlocal epoch
        while True:
            seq = next(counter)
            if seq % 7 == 0:
                epoch += 1
            used = epoch
            req = AdmitRequest(
                key=key(seq),
                application_id=app(seq),
                source=Source.YARN,
                resources=Resources(1, 1),
                request_id=f"r{seq}",
            )
            res = ledger.admit(req, used)
            assert res.accepted, res
            await ledger.flush()
            say(f"DURABLE {req.key} {used}")

    await asyncio.gather(*(admitter() for _ in range(4)))


def zygote(path: str, node_id: str) -> None:
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd != "RUN":
            print(f"ERROR unknown command {line.strip()!r}", flush=True)
            continue
        sys.stdout.flush()
        # The writer waits until its PID line is out: it could otherwise print LOADED first (a busy machine
        # may run the child before the parent gets back from fork), and the test reads PID first.
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)
            os.close(go_r)
            try:
                asyncio.run(main(path, node_id, int(arg)))
            except BaseException:
                traceback.print_exc()
            os._exit(1)
        os.close(go_r)
        print(f"PID {pid}", flush=True)
        os.write(go_w, b"g")
        os.close(go_w)
        _, status = os.waitpid(pid, 0)
        print(f"EXIT {pid} {status}", flush=True)


if __name__ == "__main__":
    zygote(sys.argv[1], sys.argv[2])
