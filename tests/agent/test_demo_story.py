"""The demo tells its story: its plots shade and name the phases, the phase after the memory hog says
whether anything was evicted, the verdict is one plain line, every `null` of the summary says why it is
missing, and a machine busy with other work gets a warning instead of a verdict. All on hand-built
samples: no cgroups, no processes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from agent.demo import story
from agent.demo.plots import TITLE_CHARS, fit_title, plot_timeseries
from agent.demo.runner import Demo, summarize

MARKS = [(0.4, story.PREFLIGHT), (1.4, "0 starting HP"), (2.0, story.ALONE), (8.0, story.BE_STARTING),
         (9.5, story.NO_AGENT), (15.5, story.WITH_AGENT), (21.5, story.HP_IDLE), (25.5, story.HP_BUSY),
         (28.5, story.HOG_STARTING), (30.0, story.HOG), (41.0, story.AFTER_EVICTION), (43.0, "writing plots")]


def test_phase_spans_name_every_step_and_merge_the_start_of_be_into_its_phase() -> None:
    spans = story.phase_spans(MARKS, end=44.0)
    assert [(s.start, s.end, s.label) for s in spans] == [
        (2.0, 8.0, "HP alone"), (8.0, 15.5, "BE, no agent"), (15.5, 21.5, "BE + agent"),
        (21.5, 25.5, "HP idle"), (25.5, 28.5, "HP busy"), (28.5, 41.0, "memory hog"),
        (41.0, 43.0, "after eviction")]
    assert all(s.label in story.SHADES for s in spans)  # each has its own shade


def test_the_last_phase_runs_to_the_end_and_empty_phases_are_dropped() -> None:
    spans = story.phase_spans([(1.0, story.ALONE), (5.0, story.NO_AGENT), (5.0, story.WITH_AGENT)], end=9.0)
    assert [(s.start, s.end, s.label) for s in spans] == [(1.0, 5.0, "HP alone"), (5.0, 9.0, "BE + agent")]
    assert story.phase_spans([], end=3.0) == []


def test_the_phase_after_the_hog_says_whether_anything_was_evicted() -> None:
    assert story.after_hog_phase(0) == story.NOTHING_EVICTED
    assert story.PLOT_LABELS[story.NOTHING_EVICTED] == "none evicted"  # never "after eviction"
    assert story.after_hog_phase(2) == story.AFTER_EVICTION
    assert story.PLOT_LABELS[story.after_hog_phase(1)] == "after eviction"


def p99(alone: float | None, no_agent: float | None, agent: float | None) -> dict[str, float | None]:
    return {story.ALONE: alone, story.NO_AGENT: no_agent, story.WITH_AGENT: agent}


TPUT = {story.ALONE: 1000.0, story.NO_AGENT: 600.0, story.WITH_AGENT: 950.0}


@pytest.mark.parametrize(("figures", "head"), [
    (p99(0.4, 3.0, 0.5), "verdict: the agent protected HP: its wake-up p99 was 6.0x lower than without it"),
    (p99(0.4, 1.0, 1.77), "verdict: the agent did not protect HP here: its wake-up p99 was 1.8x higher"),
    (p99(0.4, 1.0, 1.1), "verdict: no clear difference"),
])
def test_the_verdict_is_one_plain_line_with_its_figures(figures: dict[str, float | None], head: str) -> None:
    line = story.verdict(figures, TPUT, busy=None)
    assert line.startswith(head) and "\n" not in line
    assert f"{figures[story.WITH_AGENT]:.2f} ms with the agent" in line
    assert "95% of alone with the agent, 60% without" in line


def test_a_busy_machine_gets_no_verdict_however_the_figures_look() -> None:
    warning = story.busy_warning({story.PREFLIGHT: 1.2, story.ALONE: 0.9}, ncpus=2, loadavg_before=3.1)
    assert warning is not None
    for figures in (p99(0.4, 1.0, 1.77), p99(0.4, 3.0, 0.5)):
        line = story.verdict(figures, TPUT, warning)
        assert line.startswith("verdict: none - the machine was busy with other work")
        assert "worse" not in line and "protected" not in line


def test_a_missing_p99_gives_no_verdict_and_names_the_phase() -> None:
    line = story.verdict(p99(0.4, None, 0.5), TPUT, busy=None)
    assert line == "verdict: none - HP's wake-up p99 was not measured in: BE, no agent (see why_null)"


def test_a_quiet_machine_gets_no_warning() -> None:
    assert story.busy_warning({story.PREFLIGHT: 0.05, story.ALONE: 0.1, story.NO_AGENT: 0.2,
                               story.WITH_AGENT: 0.12}, ncpus=2, loadavg_before=0.3) is None


def test_other_load_over_the_limit_in_any_phase_warns_with_the_figures() -> None:
    other = {story.PREFLIGHT: 0.1, story.ALONE: 0.1, story.NO_AGENT: 1.34, story.WITH_AGENT: 0.2}
    warning = story.busy_warning(other, ncpus=2, loadavg_before=2.5)
    assert warning is not None
    assert warning.startswith("warning: other work on this machine used up to 1.34 of its 2")
    assert "(before 0.10, HP alone 0.10, BE, no agent 1.34" in warning
    assert "load average 2.50 before the demo" in warning
    assert "not meaningful" in warning
    # the limit scales with the machine: 1.34 CPUs of other work is within it on 16 CPUs
    assert story.busy_warning(other, ncpus=16, loadavg_before=None) is None


def test_unmeasured_load_is_said_and_does_not_withhold_the_verdict() -> None:
    warning = story.busy_warning({story.ALONE: None}, ncpus=2, loadavg_before=None)
    assert warning is not None and "could not be measured" in warning
    assert story.verdict(p99(0.4, 3.0, 0.5), TPUT, warning).startswith("verdict: the agent protected HP")


def test_machine_busy_time_comes_from_proc_stat_less_idle_and_iowait() -> None:
    stat = ("cpu  1000 50 200 5000 300 10 20 30 400 0\n"
            "cpu0 500 25 100 2500 150 5 10 15 200 0\nintr 1 2 3\n")
    busy, total = story.cpu_busy_s(stat)
    assert busy == pytest.approx((1000 + 50 + 200 + 10 + 20 + 30) / 100)  # guest (in user) not counted twice
    assert total == pytest.approx((1000 + 50 + 200 + 5000 + 300 + 10 + 20 + 30) / 100)
    with pytest.raises(ValueError, match="no cpu line"):
        story.cpu_busy_s("intr 1 2 3\n")
    assert story.other_cpus(machine_busy_s=3.0, demo_cpu_s=1.0, seconds=2.0) == pytest.approx(1.0)
    assert story.other_cpus(machine_busy_s=1.0, demo_cpu_s=1.2, seconds=2.0) == 0.0  # never negative


def test_every_null_is_explained_also_inside_lists() -> None:
    summary = {"a": None, "b": 1, "cuts": [0.2, None], "c": None}
    why = story.explain_nulls(summary, {"a": "because", "cuts[1]": "never cut"})
    assert why == {"a": "because", "cuts[1]": "never cut", "c": "not measured (no reason recorded)"}


@pytest.mark.parametrize(("args", "words"), [
    ((None, None, None, 3.0), "published no BE budget"),
    ((400, 400, 400, 3.0), "had not grown while HP was idle (400m then, 400m"),
    ((1500, 400, 1500, 3.0), "did not cut the BE budget below 1500m within 3 s of HP's load coming back; "
                             "lowest 1500m"),
])
def test_a_missing_cut_time_says_why(args: tuple[int | None, int | None, int | None, float],
                                     words: str) -> None:
    assert words in story.no_cut_reason(*args)


def test_an_empty_eviction_list_says_how_far_the_hog_got() -> None:
    assert story.none_evicted_reason(0.0) == "nothing was evicted: the memory hog did not run"
    why = story.none_evicted_reason(20.4, 10.7)
    assert why == ("nothing was evicted: the memory hog ran 20 s without the node's memory working set "
                   "crossing the eviction threshold (at most 10.7% of the node's memory)")


def fake_demo(p99_ms: dict[str, float | None], other: dict[str, float | None],
              budgets: list[int]) -> Demo:
    samples = [{"t": float(i), "be_budget_milli_cpu": b, "mem_pct": 5.0 + i} for i, b in enumerate(budgets)]
    return cast(Demo, SimpleNamespace(p99_ms=p99_ms, other_cpus=other, samples=samples))


def nulls(value: object, key: str = "") -> list[str]:
    if value is None:
        return [key]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in nulls(v, f"{key}[{i}]")]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in nulls(v, f"{key}.{k}" if key else k)]
    return []


def test_the_summary_explains_each_of_its_nulls_and_an_empty_eviction_list() -> None:
    """The run the verdict was missing from: no agent budget, no cut, a probe that missed a phase, no
    eviction, a load figure that could not be read."""
    demo = fake_demo(p99(0.4, None, 0.6), {story.PREFLIGHT: None, story.ALONE: 0.1}, budgets=[-1, -1])
    cuts = [story.Cut(None, story.no_cut_reason(None, None, None, 3.0)),
            story.Cut(None, story.no_cut_reason(400, 400, 400, 3.0))]
    summary = summarize(0.0, 0.0, 0.0, [], cuts, demo, hog_ran_s=20.0, ncpus=2, loadavg_before=None)
    why = cast(dict[str, str], summary["why_null"])
    missing = nulls({k: v for k, v in summary.items() if k not in ("why_null", "warning")})
    assert missing and set(missing) <= set(why), f"unexplained: {set(missing) - set(why)}"
    assert all(why[k] and "no reason recorded" not in why[k] for k in missing)
    assert "had not grown while HP was idle" in why["be_cut_after_hp_load_s[1]"]
    assert why["evicted"].startswith("nothing was evicted: the memory hog ran 20 s")
    assert why["evicted"].endswith("(at most 6% of the node's memory)")
    assert "hp_wakeup_p99_ms_no_agent" in why["p99_with_agent_vs_no_agent"]
    assert cast(str, summary["verdict"]).startswith("verdict: none - HP's wake-up p99 was not measured in")


def test_the_summary_warns_and_withholds_the_verdict_on_a_busy_machine() -> None:
    """The case that once printed a bare "worse with the agent": p99 1.77x without the agent."""
    demo = fake_demo(p99(0.5, 1.0, 1.77), {story.PREFLIGHT: 1.1, story.ALONE: 0.9, story.NO_AGENT: 1.2,
                                           story.WITH_AGENT: 1.0}, budgets=[500, 1500])
    summary = summarize(1000.0, 700.0, 650.0, [], [story.Cut(0.12)], demo, hog_ran_s=3.0, ncpus=2,
                        loadavg_before=2.4)
    assert cast(str, summary["warning"]).startswith("warning: other work on this machine used up to 1.20")
    assert cast(str, summary["verdict"]).startswith("verdict: none - the machine was busy")
    assert summary["other_load_cpus"] == {"before": 1.1, "HP alone": 0.9, "BE, no agent": 1.2,
                                          "BE + agent": 1.0}
    assert summary["be_cut_after_hp_load_s"] == [0.12]


def test_long_titles_are_wrapped_to_fit() -> None:
    title = "HP wake-up p99 per second (1 HP alone: 0.412 ms, 2 BE, no agent: 3.08 ms, 3 BE + agent: 0.55 ms)"
    wrapped = fit_title(title)
    assert len(wrapped.splitlines()) == 2 and all(len(line) <= TITLE_CHARS for line in wrapped.splitlines())
    assert wrapped.replace("\n", " ") == title
    assert fit_title("short") == "short"


def test_a_plot_with_phases_shades_them_and_keeps_its_size(tmp_path: Path) -> None:
    import matplotlib.image

    spans = [(s.start, s.end, s.label) for s in story.phase_spans(MARKS, end=44.0)]
    hp = {"HP": [(t * 0.5, 1.0) for t in range(88)]}
    out = plot_timeseries(tmp_path / "p.png", "x " * 80, hp, "units/s", phases=spans, shades=story.SHADES)
    pixels = matplotlib.image.imread(out)
    assert pixels.shape[:2] == (450, 800)
    colours = {tuple(round(float(c), 2) for c in p[:3]) for p in pixels.reshape(-1, pixels.shape[2])}
    # the shades are drawn at alpha 0.7 over white: HP alone's green and BE's red tints are both there
    assert any(g > r + 0.05 and g > b + 0.05 for r, g, b in colours)
    assert any(r > g + 0.05 and r > b + 0.05 for r, g, b in colours)


def test_a_latency_plot_can_take_a_log_axis(tmp_path: Path) -> None:
    spans = [(0.0, 5.0, "HP alone: 0.41 ms"), (5.0, 10.0, "BE, no agent")]
    tail = {"p99": [(float(t), 0.3 if t != 7 else 400.0) for t in range(10)]}
    out = plot_timeseries(tmp_path / "t.png", "tail", tail, "ms", phases=spans, logy=True)
    assert out.stat().st_size > 5_000
