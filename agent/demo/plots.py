"""PNG plots for benchmarks and the demo: one call, one file, no display needed."""

from __future__ import annotations

import math
from pathlib import Path


def plot_timeseries(
    path: str | Path,
    title: str,
    series: dict[str, list[tuple[float, float]]],
    ylabel: str,
    xlabel: str = "time (s)",
) -> Path:
    """Draw each named series of (x, y) points as a line in one chart and write it to `path` as PNG.

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
        for name, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=name, linewidth=1.4)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
