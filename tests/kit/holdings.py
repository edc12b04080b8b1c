"""The journal of holdings (`cgroups/holdings.py`) as a test reads it from outside the agent: a log of JSON
lines, a header first, replayed here as the agent replays it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _replay(journal: Path) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    if not journal.exists():
        return {}, {}, {}
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    head, held, marks = lines[0], {}, {}
    for entry in lines[1:]:
        (op, arg), = entry.items()
        if op == "hold":
            held[(arg["knob"], arg["cgroup"])] = arg
        elif op == "drop":
            for knob, cgroup in arg:
                held.pop((knob, cgroup), None)
        elif op == "mark":
            marks[arg[0]] = arg[1]
        elif op == "unmark":
            marks.pop(arg, None)
    return head, held, marks


def held(journal: Path) -> dict[tuple[str, str], str]:
    """(knob, cgroup) -> holder of each holding the journal file names now ({} when there is no file)."""
    return {key: h["holder"] for key, h in _replay(journal)[1].items()}


def marks(journal: Path) -> dict[str, Any]:
    """The marks (holdings that are not cgroup files: `root`, `egress`) the journal file names now."""
    return _replay(journal)[2]


def rewrite(journal: Path, *, boot_id: str | None = None, **changed: Any) -> None:
    """Change the journal file as another boot's or a damaged one would read: its boot id, or marks."""
    head, held_now, marks_now = _replay(journal)
    if boot_id is not None:
        head["boot_id"] = boot_id
    marks_now.update(changed)
    lines = [head, *({"hold": h} for h in held_now.values()),
             *({"mark": [k, v]} for k, v in marks_now.items())]
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
