"""Kubernetes quantities as Go's `resource.Quantity.String()` writes them (canonical form), and Go durations.

CPU goes out as `NewMilliQuantity(milli, DecimalSI)` and memory as `NewQuantity(bytes, BinarySI)`, as
koordlet writes them: `1500m`, `2`, `12k`; `2Gi`, `1536Mi`, `1000000`.
"""

from __future__ import annotations

import re

_DECIMAL = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""))
_BINARY = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def milli_cpu(milli: int) -> str:
    """A DecimalSI quantity of `milli` thousandths, in its canonical form."""
    if milli % 1000:
        return f"{milli}m"
    return decimal(milli // 1000)


def decimal(value: int) -> str:
    """A DecimalSI integer in its canonical form (largest exact power-of-1000 suffix)."""
    for exp, suffix in _DECIMAL:
        if value % 10**exp == 0 and (value != 0 or exp == 0):
            return f"{value // 10**exp}{suffix}"
    return str(value)  # not reached: exp 0 always divides


def binary_bytes(value: int) -> str:
    """A BinarySI quantity in its canonical form; under 1024 Go writes it as DecimalSI."""
    if -1024 < value < 1024:
        return decimal(value)
    for shift, suffix in _BINARY:
        if value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)


def go_duration(seconds: float) -> str:
    """`metav1.Duration` JSON: Go's `time.Duration.String()` for whole seconds (`5m0s`, `1h0m0s`, `30s`)."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


def parse_go_duration(text: object, where: str) -> float:
    """A Go duration string (`5m0s`, `1h`, `90s`, `1.5h`) in seconds; ValueError naming `where` if not one."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"{where}: expected a duration string such as '5m0s', got {text!r}")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(f"{where}: {text[:40]!r} is not a Go duration")
    return total
