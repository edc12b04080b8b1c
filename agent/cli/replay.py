"""`coloc-agent replay TRACE [--config FILE] [--set KEY=VALUE ...] [--json] [--plot PNG]`: what the agent
would have done on the node the trace was recorded on, with other settings, beside what it did
(docs/replay.md).

TRACE is a trace file or the directory of the trace files (`trace.dir`). Without `--config` or `--set` the
replay runs the recorded settings and must decide every tick as recorded: the exit code is 1 when a tick
differs. Exit 2: the trace or a setting cannot be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.demo.plots import fit_title
from agent.trace import overrides
from agent.trace.codec import TraceError
from agent.trace.params import TickSettings
from agent.trace.replay import Replay, records


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coloc-agent replay", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("trace", help="a trace file, or the directory of trace files (trace.dir)")
    p.add_argument("--config", help="replay with this config file's settings instead of the recorded ones")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="replay with this setting changed (config keys: policies.*, batch.*, eviction.*, "
                        "...); repeatable")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--plot", type=Path, metavar="PNG",
                   help="also draw BE's CPU budget of both runs on one time axis, evictions marked "
                        "(matplotlib)")
    return p


def plot(path: Path, replay: Replay, title: str) -> None:
    """BE's CPU budget, recorded and replayed, over the trace's time; each run's evictions as a mark."""
    try:
        import matplotlib
    except ImportError:
        raise TraceError("--plot needs matplotlib (pip install 'coloc-agent[plots]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at = replay.series_at
    t0 = at[0]
    xs = [t - t0 for t in at]
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    try:
        for name, run, style in (("recorded", replay.recorded, "-"), ("replay", replay.replayed, "--")):
            ys = [float("nan") if g is None else g / 1000 for g in run.grants]
            line = ax.plot(xs, ys, style, linewidth=1.2, label=f"BE CPU budget, {name}")[0]
            for i, e in enumerate(run.evictions):
                ax.axvline(e["at"] - t0, color=line.get_color(), linestyle=style, linewidth=0.8, alpha=0.7,
                           label=f"eviction, {name}" if i == 0 else None)
        ax.set_title(fit_title(title), fontsize=10)
        ax.set_xlabel("time since the trace's first tick (s)")
        ax.set_ylabel("cores")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4, fontsize=8, frameon=False)
        fig.tight_layout()
        try:
            fig.savefig(path, format="png")
        except OSError as err:
            raise TraceError(f"--plot {path}: cannot write: {err.strerror}") from None
    finally:
        plt.close(fig)


def _change(pct: bool, old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return ""
    if pct:
        return f"{(new - old) / old * 100:+.1f} %" if old else ""
    d = new - old
    return f"{d:+g}"


ROWS = (("BE CPU budget, mean (milli-CPU)", "be_budget_mean_milli", True),
        ("BE CPU granted (core-seconds)", "be_cpu_core_s", True),
        ("BE budget cuts (ticks)", "be_budget_cuts", False),
        ("evictions", "evictions", False),
        ("admissions refused", "admissions_refused", False),
        ("admissions accepted", "admissions_accepted", False),
        ("batch allocatable CPU, mean (milli-CPU)", "batch_allocatable_mean_milli", True))


def headline(changes: list[str], rec: dict[str, Any], rep: dict[str, Any]) -> str:
    """One line: the settings changed and what changed with them."""
    what = "; ".join(changes) if changes else "recorded settings"
    parts = []
    old, new = rec["be_budget_mean_milli"], rep["be_budget_mean_milli"]
    if old and new is not None:
        parts.append(f"BE budget {(new - old) / old * 100:+.0f} % on average")
    for key, word in (("be_budget_cuts", "budget cuts"), ("evictions", "evictions"),
                      ("admissions_refused", "admissions refused")):
        d = rep[key] - rec[key]
        parts.append(f"{abs(d)} {'more' if d > 0 else 'fewer'} {word}" if d else f"same {word}")
    return f"{what}: " + ", ".join(parts)


def _changes(args: argparse.Namespace, replay: Replay,
             pairs: Sequence[tuple[str, Any]]) -> list[str]:
    first = replay.first_recorded
    out = [f"config {args.config}"] if args.config else []
    for key, value in pairs:
        was = overrides.value_of(first, key) if isinstance(first, TickSettings) else None
        out.append(f"{key} {was} → {value}")
    return out


def report(args: argparse.Namespace, replay: Replay, pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    rec, rep = replay.recorded.summary(), replay.replayed.summary()
    changes = _changes(args, replay, pairs)
    at = replay.series_at
    return {
        "trace": args.trace, "changes": changes, "ticks": rec["ticks"],
        "seconds": round(at[-1] - at[0], 1) if at else 0.0,
        "recorded": rec, "replayed": rep,
        "ticks_differing": replay.differing, "first_difference": replay.first_difference,
        "restarts": replay.restarts,
        "evictions": {"recorded": replay.recorded.evictions, "replayed": replay.replayed.evictions},
        "admissions_refused": {"recorded": replay.recorded.refused, "replayed": replay.replayed.refused},
        "summary": headline(changes, rec, rep),
    }


def render(out: dict[str, Any]) -> str:
    rec, rep = out["recorded"], out["replayed"]
    lines = [f"trace {out['trace']}: {out['ticks']} ticks over {out['seconds']:.0f} s"
             + (f", {out['restarts']} restart(s) or gap(s)" if out["restarts"] else ""),
             "settings: " + ("; ".join(out["changes"]) or "as recorded"), "",
             f"{'':42}{'recorded':>12}{'replay':>12}{'change':>12}"]
    for label, key, pct in ROWS:
        a, b = rec[key], rep[key]
        lines.append(f"{label:42}{'-' if a is None else a:>12}{'-' if b is None else b:>12}"
                     f"{_change(pct, a, b):>12}")
    for name in ("recorded", "replayed"):
        evs = out["evictions"][name]
        if evs:
            lines.append(f"\nevictions, {name}:")
            lines += [f"  tick {e['tick']:>6}  {e['key']}  {e['reason']}: {e['why']}" for e in evs[:20]]
            if len(evs) > 20:
                lines.append(f"  ... {len(evs) - 20} more")
        refused = out["admissions_refused"][name]
        if refused:
            lines.append(f"\nadmissions refused, {name}:")
            lines += [f"  tick {r['tick']:>6}  {r['reason']}" for r in refused[:10]]
    lines.append(f"\nticks decided differently: {out['ticks_differing']} of {out['ticks']}")
    lines.append(out["summary"])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        pairs = [overrides.parse_pair(s) for s in args.sets]
        base = overrides.from_config(args.config) if args.config else None

        def override(recorded: TickSettings) -> TickSettings:
            return overrides.apply(base(recorded) if base is not None else recorded, pairs)

        replay = Replay(override if (pairs or base is not None) else None).run(records(Path(args.trace)))
    except TraceError as err:
        print(f"coloc-agent replay: {err}", file=sys.stderr)
        return 2
    out = report(args, replay, pairs)
    if args.plot is not None:
        try:
            plot(args.plot, replay, out["summary"])
        except TraceError as err:
            print(f"coloc-agent replay: {err}", file=sys.stderr)
            return 2
    print(json.dumps(out) if args.json else render(out))
    exact = not pairs and base is None
    return 1 if exact and replay.differing else 0
