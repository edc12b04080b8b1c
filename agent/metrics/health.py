"""Liveness and readiness verdicts from the latest `Published`: pure functions of the board and a clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.published import Published, source_states


@dataclass(frozen=True)
class HealthConfig:
    """`/healthz` turns red when no tick started for `stall_intervals` loop intervals, or when there was no
    tick at all `startup_grace_s` after the server started. `clock` must be the clock of
    `Published.tick_monotonic` (time.monotonic)."""

    stall_intervals: float = 3.0
    startup_grace_s: float = 60.0
    clock: Callable[[], float] = field(default=time.monotonic)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    body: dict[str, object]


def liveness(published: Published | None, now: float, started: float, cfg: HealthConfig) -> Verdict:
    """Alive when the loop ticked within `stall_intervals` intervals (monotonic clock)."""
    if published is None:
        waited = now - started
        if waited <= cfg.startup_grace_s:
            return Verdict(True, {"status": "starting", "waited_s": round(waited, 3)})
        return Verdict(
            False,
            {
                "status": "stalled",
                "reason": f"no loop tick in the {cfg.startup_grace_s:g} s since start",
                "waited_s": round(waited, 3),
            },
        )
    age = now - published.tick_monotonic
    limit = cfg.stall_intervals * published.interval_s
    body: dict[str, object] = {
        "tick": published.tick,
        "tick_age_s": round(age, 6),
        "limit_s": round(limit, 6),
    }
    if age > limit:
        return Verdict(
            False,
            {
                "status": "stalled",
                "reason": f"last tick started {age:.3f} s ago, more than {cfg.stall_intervals:g} intervals "
                f"of {published.interval_s:g} s",
                **body,
            },
        )
    return Verdict(True, {"status": "ok", **body})


def readiness(published: Published | None, now: float, persistence_error: str | None = None) -> Verdict:
    """Ready once every source has delivered (Published.sources_synced). A source that later goes stale
    keeps the agent ready (it still serves and holds its evictions) but is named under "stale", and
    "sources" gives each one's age (on the monotonic clock `now`), staleness and reason. A state file
    that cannot be written (`persistence_error`: disk full, read-only) makes it not ready: admissions
    would be refused as unavailable."""
    if published is None:
        return Verdict(False, {"status": "not_ready", "reason": "no tick published yet"})
    states = source_states(published, now)
    sources = {s.name: {"age_s": None if s.age_s is None else round(s.age_s, 3), "stale": s.stale,
                        "reason": s.reason} for s in states}
    stale = {s.name: s.reason for s in states if s.stale}
    if not published.sources_synced:
        return Verdict(False, {"status": "not_ready", "reason": "sources not synced yet", "stale": stale,
                               "sources": sources})
    missing = published.snapshot.be_tier.missing if published.snapshot is not None else ""
    if missing:
        return Verdict(False, {"status": "not_ready", "reason": missing, "sources": sources})
    if persistence_error:
        reason = f"state file not writable: {persistence_error}"
        return Verdict(False, {"status": "not_ready", "reason": reason,
                               "sources": sources})
    body: dict[str, object] = {"status": "ready", "tick": published.tick, "sources": sources}
    if stale:
        body["stale"] = stale
    return Verdict(True, body)
