"""Where an agent's memory goes over a long run: run it under this, and compare two of the dumps.

    python -m kit.heaptrace DIR EVERY_S run --config FILE   # the agent (`coloc-agent run ...`), traced
    python -m kit.heaptrace --compare DIR A B               # what grew from dump A to dump B

Traced, the agent runs with tracemalloc on (12 frames a trace; it costs the agent time and about twice its
heap) and a thread writes, every EVERY_S seconds, dump N: `DIR/snap-N.pickle` (a tracemalloc snapshot) and a
line of `DIR/trace.jsonl` (the Python objects the collector tracks, counted by type; glibc's malloc figures,
mallinfo2; VmRSS and RssAnon). `--compare` prints the allocation sites (by their traceback's last frames)
whose memory grew most from A to B, and the types whose object count grew. bench/soak.py --heap-trace runs
the soak's agent so.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path

MALLINFO = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO]


def _mallinfo() -> dict[str, int]:
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):  # not glibc (>= 2.33)
        return {}
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name in MALLINFO}


def _status() -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            out[key] = int(value.split()[0])
    return out


def _dump(out: Path, n: int, t0: float) -> None:
    objects = gc.get_objects()
    types = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
    del objects
    tracemalloc.take_snapshot().dump(str(out / f"snap-{n:03d}.pickle"))
    line = {"dump": n, "t_s": round(time.monotonic() - t0, 1),
            "traced_bytes": tracemalloc.get_traced_memory()[0], "blocks": sys.getallocatedblocks(),
            "mallinfo": _mallinfo(), "status_kib": _status(), "types": dict(types.most_common(300))}
    with (out / "trace.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


def _every(out: Path, every_s: float) -> None:
    t0 = time.monotonic()
    for n in range(1, 1 << 30):
        time.sleep(every_s)
        _dump(out, n, t0)


def compare(out: Path, a: int, b: int, top: int = 15) -> None:
    skip = [tracemalloc.Filter(False, f) for f in (tracemalloc.__file__, __file__, "<frozen *>")]
    skip.append(tracemalloc.Filter(False, __file__, all_frames=True))  # the dumps' own
    s1 = tracemalloc.Snapshot.load(str(out / f"snap-{a:03d}.pickle")).filter_traces(skip)
    s2 = tracemalloc.Snapshot.load(str(out / f"snap-{b:03d}.pickle")).filter_traces(skip)
    stats = s2.compare_to(s1, "traceback")
    print(f"traced: {sum(s.size_diff for s in stats) / 1024:+.1f} KiB from dump {a} to dump {b}")
    for st in stats[:top]:
        print(f"{st.size_diff / 1024:+9.1f} KiB {st.count_diff:+7d} blocks (now {st.size / 1024:.1f} KiB)")
        for frame in list(st.traceback)[-4:]:
            print(f"        {frame.filename}:{frame.lineno}")
    lines = {d["dump"]: d for d in map(json.loads, (out / "trace.jsonl").read_text().splitlines())}
    ta, tb = lines[a]["types"], lines[b]["types"]
    grown = sorted(((tb.get(k, 0) - ta.get(k, 0), k) for k in ta.keys() | tb.keys()), reverse=True)
    print("objects by type: " + ", ".join(f"{k} {d:+d}" for d, k in grown[:10] if d > 0))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--compare"] and len(argv) == 4:
        compare(Path(argv[1]), int(argv[2]), int(argv[3]))
        return
    if len(argv) < 3:
        sys.exit("usage: python -m kit.heaptrace DIR EVERY_S AGENT-ARGS... | --compare DIR A B")
    out, every_s = Path(argv[0]), float(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(12)
    threading.Thread(target=_every, args=(out, every_s), daemon=True, name="heaptrace").start()
    sys.argv = ["coloc-agent", *argv[2:]]
    runpy.run_module("agent.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
