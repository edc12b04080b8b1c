"""Real workloads for the demo, the benchmarks and the e2e tests: `python -m agent.demo.workloads KIND`.

- `hp THREADS COUNTER_FILE`: CPU-bound service; every thread does fixed work units and the process writes
  its cumulative count (8 bytes, little-endian) to COUNTER_FILE every 50 ms, so throughput = Δcount / Δt.
- `burn`: one spinning CPU burner.
- `hog STEP_MIB EVERY_S MAX_MIB`: memory that grows by STEP_MIB every EVERY_S seconds (pages touched).
- `probe PERIOD_MS OUT_FILE`: wakes every PERIOD_MS and records how late each wake-up was (µs, int32).
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time


def _work_unit() -> int:
    acc = 0
    for i in range(2000):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


def hp(threads: int, counter_file: str) -> None:
    counts = [0] * threads

    def worker(slot: int) -> None:
        while True:
            _work_unit()
            counts[slot] += 1

    for t in range(threads):
        threading.Thread(target=worker, args=(t,), daemon=True).start()
    fd = os.open(counter_file, os.O_WRONLY | os.O_CREAT, 0o644)
    while True:
        time.sleep(0.05)
        os.pwrite(fd, struct.pack("<Q", sum(counts)), 0)


def burn() -> None:
    x = 0
    while True:
        x = (x + 1) & 0xFFFF


def hog(step_mib: int, every_s: float, max_mib: int) -> None:
    chunks: list[bytearray] = []
    while True:
        if len(chunks) * step_mib < max_mib:
            block = bytearray(step_mib << 20)
            for off in range(0, len(block), 4096):
                block[off] = 1
            chunks.append(block)
        time.sleep(every_s)


def probe(period_ms: float, out_file: str) -> None:
    period = period_ms / 1000.0
    fd = os.open(out_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    buf = bytearray()
    next_at = time.monotonic() + period
    while True:
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        late_us = int((time.monotonic() - next_at) * 1e6)
        buf += struct.pack("<i", max(0, min(late_us, 2**31 - 1)))
        if len(buf) >= 400:
            os.write(fd, bytes(buf))
            buf.clear()
        next_at += period
        if next_at < time.monotonic():  # fell behind by more than a period: resynchronise
            next_at = time.monotonic() + period


def read_counter(path: str) -> int:
    """The cumulative work count an `hp` process last wrote (0 before its first write)."""
    try:
        with open(path, "rb") as f:
            data = f.read(8)
    except FileNotFoundError:
        return 0
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


def main(argv: list[str]) -> int:
    kind, args = argv[0], argv[1:]
    if kind == "hp":
        hp(int(args[0]), args[1])
    elif kind == "burn":
        burn()
    elif kind == "hog":
        hog(int(args[0]), float(args[1]), int(args[2]))
    elif kind == "probe":
        probe(float(args[0]), args[1])
    else:
        print(f"unknown workload {kind!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
