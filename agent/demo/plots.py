"""PNG plots for benchmarks and the demo: one call, one file, no display needed."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

TITLE_CHARS = 72  # a title line longer than this does not fit the 8-inch figure at the title's font size


def fit_title(title: str, width: int = TITLE_CHARS) -> str:
    """The title wrapped on words to lines of at most `width` characters (a longer word stays whole)."""
    return "\n".join(textwrap.wrap(title, width, break_long_words=False)) or title


def plot_timeseries(
    path: str | Path,
    title: str,
    series: dict[str, list[tuple[float, float]]],
    ylabel: str,
    xlabel: str = "time (s)",
    phases: Sequence[tuple[float, float, str]] = (),
    shades: dict[str, str] | None = None,
    logy: bool = False,
) -> Path:
    """Draw each named series of (x, y) points as a line in one chart and write it to `path` as PNG.

    `phases` are (start, end, label) spans of x shaded behind the lines and named at the top of the chart
    (labels on two alternating rows, so that neighbours do not overlap), each in `shades[label]`'s colour
    (grey otherwise). The title is wrapped to fit (`fit_title`); the legend sits below the chart. `logy`: a
logarithmic y axis (a latency whose spikes would flatten everything else).

    Raises ValueError when there is nothing to draw or a point is not a pair of finite numbers; the
    file is then not written.
    """
    if not series or all(not points for points in series.values()):
        raise ValueError(f"plot {title!r}: no points to draw")
    for name, points in series.items():
        for i, point in enumerate(points):
            if len(point) != 2 or not all(isinstance(v, int | float) and math.isfinite(v) for v in point):
                raise ValueError(f"plot {title!r}: series {name!r} point {i} is not a finite (x, y): {point}")
    import matplotlib

    matplotlib.use("Agg")  # never needs a display
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        top = 0.0
        for name, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=name, linewidth=1.4)
                top = max(top, *ys)
        for i, (start, end, label) in enumerate(phases):
            shade = (shades or {}).get(label, "#e6e6e6")
            ax.axvspan(start, end, color=shade, alpha=0.7, linewidth=0, zorder=0)
            ax.axvline(start, color="#888888", linewidth=0.6, linestyle=":", zorder=0)
            ax.text((start + end) / 2, 0.985 if i % 2 == 0 else 0.915, label, ha="center", va="top",
                    transform=ax.get_xaxis_transform(), fontsize=7, color="#333333", zorder=3)
        if logy:
            ax.set_yscale("log")
        if phases and logy:  # head room for the phase names above the lines
            ax.set_ylim(top=(top or 1.0) * 4)
        elif phases:
            ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]), top=(top or 1.0) * 1.3)
        ax.set_title(fit_title(title), fontsize=11)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=max(1, len(series)), fontsize=8,
                  frameon=False)
        fig.tight_layout()
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
