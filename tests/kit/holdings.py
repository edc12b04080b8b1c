"""The journal of holdings (`cgroups/holdings.py`) as a test reads it from outside the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def held(journal: Path) -> dict[tuple[str, str], str]:
    """(knob, cgroup) -> holder of each holding the journal file names now ({} when there is no file)."""
    if not journal.exists():
        return {}
    body = json.loads(journal.read_text())
    return {(h["knob"], h["cgroup"]): h["holder"] for h in body["held"]}


def marks(journal: Path) -> dict[str, Any]:
    """The marks (holdings that are not cgroup files: `root`, `egress`) the journal file names now."""
    return dict(json.loads(journal.read_text())["marks"]) if journal.exists() else {}


def rewrite(journal: Path, *, boot_id: str | None = None, **marks: Any) -> None:
    """Change the journal file as another boot's or a damaged one would read: its boot id, or marks."""
    body = json.loads(journal.read_text())
    if boot_id is not None:
        body["boot_id"] = boot_id
    body["marks"].update(marks)
    journal.write_text(json.dumps(body))
