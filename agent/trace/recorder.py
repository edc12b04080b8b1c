"""What a tick hands the trace, and the recorder that turns it into the trace's records.

Records (one JSON object a line, `k` its kind):
- `head`: the first of every file: the node, the tick, the settings in force (`TickSettings`, and where
  each policy setting came from) and the policies' state before that tick, so a file replays on its own;
- `set`: the settings in force changed (a NodeSLO) before this tick;
- `tick`: the snapshot the policies saw (workloads as rows of `WorkloadTable`, the rest field by field), the
  evictions that ended since the last tick (their outcome and time: the pipeline forgets failed victims and
  moves past refused ones), the admissions judged since the last tick (request, facts, verdict), each
  source's data age, and what the tick decided (actions, named outputs) and what the executor did with each
  (records, and the victims whose eviction did not happen).
The records are built on the loop's thread (fresh values, never touched again: a fraction of a millisecond
at 200 workloads, `bench/replay.py`); the text, the compression and the disk are the writer's thread's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.published import ActionRecord
from agent.trace.codec import WorkloadTable, encode, snapshot_rest
from agent.trace.files import TraceWriter
from agent.trace.params import TickSettings
from qos.admission import Admission, AdmissionFacts
from qos.model import NodeSnapshot, Resources
from qos.pipeline import Decision, PipelineState
from qos.registry import NodeOutputs

log = logging.getLogger("coloc.trace")

VERSION = 1


Judged = tuple[Resources, AdmissionFacts, Admission]
"""One admission as the ledger judged it: the request, the facts it was judged on, the verdict."""


@dataclass(frozen=True, slots=True)
class TickTrace:
    """One tick as the loop ran it: `prior` is the policies' state at its start (before what ended was
    settled), `ended` the evictions that ended since the last tick, `try_next` those whose evictor asked for
    the next victim, `done` the executor's records of this tick's actions, `not_done` the victims whose
    eviction did not happen."""

    tick: int
    at: float
    prior: PipelineState
    ended: Sequence[ActionRecord]
    try_next: Collection[str]
    snapshot: NodeSnapshot
    decision: Decision[NodeOutputs]
    done: Sequence[ActionRecord]
    not_done: Collection[str]
    source_ages: Mapping[str, float] = field(default_factory=dict)  # each source's data age (no policy's)


class TickRecorder:
    """Encodes each tick (`record`, a loop hook) and hands it to the writer."""

    def __init__(self, writer: TraceWriter, settings: Callable[[], TickSettings],
                 judged: Callable[[], list[Judged]], node: str,
                 origins: Callable[[], Mapping[str, str]] = dict) -> None:
        self._writer = writer
        self._settings = settings
        self._judged = judged
        self._node = node
        self._origins = origins  # where each policy setting in force came from: default, yaml, NodeSLO
        self._table = WorkloadTable()
        self._last_settings: TickSettings | None = None
        self._started = False
        self._last_tick: int | None = None
        self.ticks = 0

    def record(self, t: TickTrace) -> None:
        settings = self._settings()
        # a tick that is not the one after the last recorded (a tick that failed half-way, or one this
        # recorder did not get) begins a new file: its header carries the state the next tick starts from
        gap = self._last_tick is not None and t.tick != self._last_tick + 1
        self._last_tick = t.tick
        if not self._started or gap or self._writer.need_new_file:
            self._table = WorkloadTable()
            head = {"k": "head", "v": VERSION, "node": self._node, "tick": t.tick, "at": t.at,
                    "settings": encode(settings), "origins": dict(self._origins()), "state": encode(t.prior)}
            self._started = self._writer.put(head, new_file=True)
            self._last_settings = settings
            if not self._started:
                return
        elif settings is not self._last_settings:
            self._last_settings = settings
            self._writer.put({"k": "set", "settings": encode(settings), "origins": dict(self._origins())})
        self._writer.put(self._tick(t))
        self.ticks += 1

    def _tick(self, t: TickTrace) -> dict[str, Any]:
        defs, rows = self._table.rows(t.snapshot.workloads)
        d = t.decision
        return {
            "k": "tick", "n": t.tick, "at": t.at,
            "end": [[r.target, r.outcome.value, r.at] for r in t.ended],
            "next": sorted(t.try_next),
            "adm": [[encode(req), encode(facts), encode(verdict)] for req, facts, verdict in self._judged()],
            "defs": defs, "rows": rows, "snap": snapshot_rest(t.snapshot),
            "act": encode(d.actions), "out": encode(d.outputs),
            "done": [[r.policy, r.kind, r.target, r.outcome.value] for r in t.done],
            "nd": sorted(t.not_done),
            "ages": {k: round(v, 3) for k, v in t.source_ages.items()},
        }

    @property
    def dropped(self) -> int:
        """Records the writer dropped (a disk slower than the ticks, or one that failed)."""
        return self._writer.dropped

    def close(self) -> None:
        self._writer.close()
