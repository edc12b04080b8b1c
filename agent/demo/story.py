"""What the demo's numbers mean, in words: the phases on the plots, the verdict line, why a figure is
missing, and whether the machine was quiet enough for the comparison to mean anything.

Pure functions over plain values (the runner measures, this module judges), so each rule is tested on
hand-built samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The runner's phases, in order. Each name says what the demo did; the last one says what happened.
PREFLIGHT = "0 machine check"
ALONE = "1 HP alone"
BE_STARTING = "2 starting BE"
NO_AGENT = "2 BE, no agent"
WITH_AGENT = "3 BE + agent"
HP_IDLE = "3 HP idle"
HP_BUSY = "3 HP busy again"
HOG_STARTING = "4 memory hog starting"
HOG = "4 memory hog"
AFTER_EVICTION = "4 after eviction"
NOTHING_EVICTED = "4 hog, none evicted"
COMPARED = (ALONE, NO_AGENT, WITH_AGENT)  # the phases whose HP figures are compared

# How each phase is named on the plots (phases not listed are not shaded), and its shade.
PLOT_LABELS = {
    ALONE: "HP alone", BE_STARTING: "BE, no agent", NO_AGENT: "BE, no agent", WITH_AGENT: "BE + agent",
    HP_IDLE: "HP idle", HP_BUSY: "HP busy", HOG_STARTING: "memory hog", HOG: "memory hog",
    AFTER_EVICTION: "after eviction", NOTHING_EVICTED: "none evicted",
}
SHADES = {
    "HP alone": "#d9f0d3", "BE, no agent": "#f7d4d4", "BE + agent": "#d4e4f7", "HP idle": "#e6e6e6",
    "HP busy": "#d4e4f7", "memory hog": "#fbe3c8", "after eviction": "#e6d9f0", "none evicted": "#eeeeee",
}

BUSY_SHARE = 0.15  # other work above this share of the machine's CPUs makes the comparison meaningless
BUSY_MIN_CPUS = 0.25  # ... and above this many CPUs (the demo's live view alone uses a few per cent of one)


def after_hog_phase(evictions: int) -> str:
    """The name of the phase after the memory hog: it says whether the agent evicted anything."""
    return AFTER_EVICTION if evictions > 0 else NOTHING_EVICTED


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    label: str


def phase_spans(marks: Sequence[tuple[float, str]], end: float) -> list[Span]:
    """The shaded spans of the plots from the phase changes (`(t, phase)`, in order) up to `end`: each
    phase with a plot label, consecutive phases of the same label merged, empty spans dropped."""
    spans: list[Span] = []
    for i, (t, phase) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else end
        label = PLOT_LABELS.get(phase)
        if label is None or stop <= t:
            continue
        if spans and spans[-1].label == label and abs(spans[-1].end - t) < 1e-9:
            spans[-1] = Span(spans[-1].start, stop, label)
        else:
            spans.append(Span(t, stop, label))
    return spans


def cpu_busy_s(proc_stat: str) -> tuple[float, float]:
    """(busy, total) CPU-seconds of the whole machine since boot, from /proc/stat's `cpu` line (USER_HZ
    100). Busy is everything but idle and iowait; steal counts as busy (another guest had the CPU);
    guest time is already in user and is not counted twice."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:9]]
            fields += [0] * (8 - len(fields))
            total = sum(fields)
            idle = fields[3] + fields[4]
            return (total - idle) / 100.0, total / 100.0
    raise ValueError("no cpu line in /proc/stat")


def other_cpus(machine_busy_s: float, demo_cpu_s: float, seconds: float) -> float:
    """CPUs used by other work than the demo's over `seconds`: the machine's busy time less the demo's."""
    return max(0.0, machine_busy_s - demo_cpu_s) / max(seconds, 1e-6)


def busy_warning(other: Mapping[str, float | None], ncpus: int, loadavg_before: float | None) -> str | None:
    """A warning when other work on the machine (CPUs it used per phase, `None` if not measured) was more
    than the comparison can bear; None when the machine was quiet enough."""
    limit = max(BUSY_SHARE * ncpus, BUSY_MIN_CPUS)
    measured = {k: v for k, v in other.items() if v is not None}
    load = f"; load average {loadavg_before:.2f} before the demo" if loadavg_before is not None else ""
    if not measured:
        return ("warning: the machine's other load could not be measured, so whether the comparison below "
                f"means anything is unknown{load}")
    worst = max(measured.values())
    if worst <= limit:
        return None
    per = ", ".join(f"{_short(k)} {v:.2f}" for k, v in measured.items())
    return (f"warning: other work on this machine used up to {worst:.2f} of its {ncpus} CPUs ({per}{load}); "
            f"more than {limit:.2f} makes HP's figures measure that work as much as BE and the agent, so the "
            "comparison below is not meaningful: run the demo on an otherwise idle machine")


def _short(phase: str) -> str:
    if phase == PREFLIGHT:
        return "before"
    return PLOT_LABELS.get(phase, phase.split(" ", 1)[-1] if phase[:1].isdigit() else phase)


def _times(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "?"


def verdict(p99: Mapping[str, float | None], throughput: Mapping[str, float], busy: str | None) -> str:
    """One plain line: did the agent protect HP? From HP's wake-up p99 (ms) and throughput (units/s) in
    the compared phases; no verdict when the machine was too busy or a figure is missing."""
    alone, no_agent, agent = (p99.get(k) for k in COMPARED)
    tput = ""
    if throughput.get(ALONE):
        base = throughput[ALONE]
        tput = (f"; HP throughput {100 * throughput.get(WITH_AGENT, 0) / base:.0f}% of alone with the agent, "
                f"{100 * throughput.get(NO_AGENT, 0) / base:.0f}% without")
    if busy is not None and not busy.startswith("warning: the machine's other load could not"):
        return ("verdict: none - the machine was busy with other work (see the warning), so these figures do "
                "not show what the agent does")
    missing = [_short(k) for k, v in zip(COMPARED, (alone, no_agent, agent), strict=True) if v is None]
    if missing or alone is None or no_agent is None or agent is None:
        return f"verdict: none - HP's wake-up p99 was not measured in: {', '.join(missing)} (see why_null)"
    figures = f"HP wake-up p99 {agent:.2f} ms with the agent, {no_agent:.2f} ms without, {alone:.2f} ms alone"
    if agent <= 0.8 * no_agent:
        head = f"the agent protected HP: its wake-up p99 was {_times(no_agent, agent)} lower than without it"
    elif agent >= 1.25 * no_agent:
        head = (f"the agent did not protect HP here: its wake-up p99 was {_times(agent, no_agent)} higher "
                "than without it")
    else:
        head = "no clear difference: HP's wake-up p99 was about the same with and without the agent"
    return f"verdict: {head} ({figures}{tput})"


@dataclass(frozen=True)
class Cut:
    """How long after HP's load came back the agent cut the BE budget, or why there is no such time."""

    seconds: float | None
    why: str | None = None


def no_cut_reason(before: int | None, idle_start: int | None, lowest_after: int | None,
                  limit_s: float) -> str:
    """Why no cut time was measured after HP's load came back."""
    if before is None:
        return "the agent had published no BE budget when HP's load came back, so there was nothing to cut"
    if idle_start is not None and before <= idle_start:
        return (f"the BE budget had not grown while HP was idle ({idle_start}m then, {before}m when HP's "
                "load came back), so there was nothing to cut back")
    low = f"; lowest {lowest_after}m" if lowest_after is not None else ""
    return (f"the agent did not cut the BE budget below {before}m within {limit_s:g} s of HP's load coming "
            f"back{low}")


def explain_nulls(summary: Mapping[str, object], reasons: Mapping[str, str]) -> dict[str, str]:
    """Every `null` of the summary (a key, or `key[i]` for a list's element) with why it is missing;
    a null without a reason given says so rather than staying unexplained."""
    out: dict[str, str] = {}
    for key, value in summary.items():
        if value is None:
            out[key] = reasons.get(key, "not measured (no reason recorded)")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if v is None:
                    name = f"{key}[{i}]"
                    out[name] = reasons.get(name, "not measured (no reason recorded)")
    return out


def none_evicted_reason(hog_ran_s: float, peak_mem_pct: float | None = None) -> str:
    """Why the summary's `evicted` is empty (`peak_mem_pct`: the node's highest memory working set, % of
    its memory, as the agent saw it)."""
    if hog_ran_s <= 0:
        return "nothing was evicted: the memory hog did not run"
    peak = f" (at most {peak_mem_pct:g}% of the node's memory)" if peak_mem_pct is not None else ""
    return (f"nothing was evicted: the memory hog ran {hog_ran_s:.0f} s without the node's memory working "
            f"set crossing the eviction threshold{peak}")


def p99_reason(phase: str) -> str:
    return (f"HP's wake-up probe recorded no wake-up during '{_short(phase)}' (not yet running, or it got "
            "no CPU in that phase)")


def ratio_reason(a_key: str, a: float | None, b_key: str, b: float | None) -> str:
    if a is None or b is None:
        gone = [k for k, v in ((a_key, a), (b_key, b)) if v is None]
        return f"needs both p99 figures; missing: {', '.join(gone)}"
    return f"{b_key} was 0 ms, so there is no ratio to it"
