"""The journal of holdings (`cgroups/holdings.py`): what a first pass over a node's pods costs the event loop.

A first pass after a boot (or an upgrade, or batch limits turned on) journals every knob it sets: BE pods ×
(pod + containers) × (quota, shares, memory limit). The journal appends one line a holding; rewriting the
whole file at every holding (what it did first) is quadratic. Both are measured side by side, in alternating
rounds, on the state directory's filesystem (`--dir`, default a temporary directory), and a steady pass (every
knob already held as it is) is checked to write nothing. Last line: one JSON object (units in key names).

    python3 bench/holdings.py [--holdings 3000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cgroups.holdings import Holding, Journal


class _Rewriting(Journal):
    """The journal as it was first written: the whole file replaced at every change."""

    def _append(self, entry: dict[str, object]) -> None:
        assert self.path is not None
        self._rewrite()
        self.stats.writes += 1


def _holdings(n: int) -> list[Holding]:
    return [Holding("cpu_quota", f"besteffort/pod{i // 3}/c{i % 3}", "batch_limits", [None, 100_000],
                    ([50_000, 100_000],)) for i in range(n)]


def first_pass_s(kind: type[Journal], directory: Path, holdings: list[Holding]) -> tuple[float, int]:
    """Seconds to journal every holding of a first pass, and the journal writes a steady pass then made."""
    path = Path(tempfile.mkdtemp(dir=directory)) / "state.json.held"
    journal = kind(path, "bench-boot", "bench-root")
    started = time.perf_counter()
    for h in holdings:
        journal.hold(h)
    elapsed = time.perf_counter() - started
    before = journal.stats.writes
    for h in holdings:  # a steady pass: every holding as it is
        journal.hold(h)
    steady = journal.stats.writes - before
    journal.close()
    path.unlink()
    path.parent.rmdir()
    return elapsed, steady


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--holdings", type=int, default=3000, help="holdings of the first pass (3,000: 1,000 BE "
                   "pods' pod and container cgroups, as the review measured)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None, help="where the journal lives (the state directory)")
    p.add_argument("--quick", action="store_true", help="CI: 600 holdings, 1 round")
    args = p.parse_args()
    n, rounds = (600, 1) if args.quick else (args.holdings, args.rounds)
    holdings = _holdings(n)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        times: dict[str, list[float]] = {"append": [], "rewrite": []}
        steady = 0
        for r in range(rounds):
            for name, kind in (("append", Journal), ("rewrite", _Rewriting)):
                elapsed, writes = first_pass_s(kind, Path(d), holdings)
                times[name].append(elapsed)
                steady += writes
                print(f"round {r} {name}: {elapsed * 1000:.1f} ms for {n} holdings", flush=True)
    append, rewrite = statistics.median(times["append"]), statistics.median(times["rewrite"])
    print(json.dumps({"holdings": n, "rounds": rounds,
                      "first_pass_append_ms": round(append * 1000, 1),
                      "first_pass_rewrite_ms": round(rewrite * 1000, 1),
                      "append_per_holding_us": round(append / n * 1e6, 1),
                      "rewrite_over_append_ratio": round(rewrite / append, 1),
                      "steady_pass_journal_writes": steady}))
    return 0 if steady == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
