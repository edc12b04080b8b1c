"""agent.demo.plots writes real PNG files with matplotlib (Agg) and refuses input it cannot draw."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from agent.demo.plots import plot_timeseries


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_writes_a_png_with_every_series(tmp_path: Path) -> None:
    series = {
        "HP p99 latency, agent on": [(t, 0.1 + 0.01 * (t % 3)) for t in range(60)],
        "HP p99 latency, agent off": [(t, 2.0 + 0.5 * (t % 5)) for t in range(60)],
        "empty": [],
    }
    out = plot_timeseries(tmp_path / "sub" / "latency.png", "HP latency", series, "ms")
    assert out == tmp_path / "sub" / "latency.png"
    assert png_size(out) == (800, 450)
    assert out.stat().st_size > 10_000  # axes, two lines and a legend, not a blank canvas

    import matplotlib.image

    pixels = matplotlib.image.imread(out)
    assert len({tuple(p) for p in pixels[::10, ::10].reshape(-1, pixels.shape[2])}) > 5


@pytest.mark.parametrize(
    ("series", "message"),
    [({}, "no points"), ({"a": []}, "no points"), ({"a": [(0.0, float("nan"))]}, "series 'a' point 0")],
)
def test_refuses_what_it_cannot_draw(
    tmp_path: Path, series: dict[str, list[tuple[float, float]]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        plot_timeseries(tmp_path / "x.png", "t", series, "y")
    assert not (tmp_path / "x.png").exists()
