"""What every benchmark shares: the external programs it needs, checked before it starts, and its last line,
printed only when every figure in it was measured.

A bench is run as a script (`python bench/<name>.py`) and imports this as `kit.bench` (docs/testing.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

# binary -> the Debian package that installs it (scripts/test installs every one of them)
PACKAGES = {
    "ip": "iproute2",
    "tc": "iproute2",
    "ping": "iputils-ping",
    "iperf3": "iperf3",
    "stress-ng": "stress-ng",
    "sleep": "coreutils",
    "timeout": "coreutils",
    "nsenter": "util-linux",
}


T0 = time.monotonic()


def drop_cache(path: Path) -> None:
    """A file's dirty pages written, then its pages dropped from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def progress(msg: str) -> None:
    """A progress line on stderr (stdout is for the figures), with the seconds since the bench started."""
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def pct(xs: Iterable[float], p: float) -> float:
    """The `p`-th percentile of `xs` (nearest rank); NaN when there is none, which `finish` refuses."""
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


class Unmeasurable(RuntimeError):
    """A figure the bench could not measure in this run; the message says which and why."""


def missing_tools(tools: Iterable[str]) -> list[str]:
    """The `tools` not found on PATH."""
    return [t for t in tools if shutil.which(t) is None]


def require_tools(bench: str, tools: Iterable[str]) -> None:
    """Exit at once (status 2) naming every program of `tools` that is not on PATH and its Debian package:
    a bench that ran without one would only print figures it could not measure."""
    missing = missing_tools(tools)
    if not missing:
        return
    for tool in missing:
        package = PACKAGES.get(tool, "?")
        print(f"{bench}: `{tool}` is not installed (not on PATH); it is in the Debian package {package} "
              f"(apt-get install {package})", file=sys.stderr)
    sys.exit(2)


def _unmeasured(value: object, path: str) -> Iterator[str]:
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _unmeasured(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _unmeasured(v, f"{path}[{i}]")


def unmeasured(figures: Mapping[str, object], required: Iterable[str] = ()) -> list[str]:
    """The figures that were not measured: every NaN or infinity (by its path, `a.b[2]`), and every key of
    `required` that is missing or not a number."""
    bad = list(_unmeasured(figures, ""))
    for key in required:
        v = figures.get(key)
        if not isinstance(v, int | float) or isinstance(v, bool):
            bad.append(key)
    return list(dict.fromkeys(bad))


def _shown(value: object) -> object:
    """`value` for a message: a non-finite number as the string "not measured"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "not measured"
    if isinstance(value, Mapping):
        return {str(k): _shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(v) for v in value]
    return value


def finish(bench: str, figures: Mapping[str, object], required: Iterable[str] = ()) -> int:
    """Print `figures` as the bench's last line (JSON) and return 0; or, when a figure could not be measured
    (see `unmeasured`), say which on stderr, with the rest of the figures, and return 1: never a NaN."""
    bad = unmeasured(figures, required)
    if bad:
        print(f"{bench}: not measured in this run: {', '.join(bad)}; the figures it has: "
              f"{json.dumps(_shown(figures), default=str)}", file=sys.stderr)
        return 1
    print(json.dumps(figures, allow_nan=False))
    return 0
