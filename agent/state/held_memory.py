"""The memory QoS values the agent has put in place, kept on disk beside the state file (`<state>.memqos`).

The executor gives back the kernel's defaults where a plan stops naming a cgroup it holds; what it holds
lived only in memory, so memory QoS turned off while the agent was down (a NodeSLO changed, the YAML
edited for the restart) left the values of the run before in place for good. A sweep of every pod's
`memory.min` would fight the kubelet, whose MemoryQoS gate writes the same files; this record lets the
next run give back only what it can tell is still its own: a cgroup whose files still hold the values
recorded here (`ResourceQosExecutor.adopt_memory`). A value changed since is another writer's and is left.

Cgroups do not outlive a boot, so the record names the boot it was made in; another boot's is ignored.
A file that is damaged or not ours gives nothing back (said once): the cost is a leftover, never a write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.state.errors import StateFileError
from agent.state.persist import StateStore
from cgroups.errors import PathOutsideRoot
from cgroups.paths import check_rel
from qos.memory_qos import MemoryValues

log = logging.getLogger("coloc.state")

FORMAT = "coloc-agent/memory-qos/v1"
MAX_BYTES = 16 << 20  # ~100 bytes a cgroup: far beyond any node's pods and containers


def _entry(v: MemoryValues) -> dict[str, Any]:
    return {"rel": v.rel, "min": v.min_bytes, "low": v.low_bytes, "high": v.high_bytes,
            "sets_high": v.sets_high}


def _value(d: Any, i: int) -> MemoryValues:
    where = f"cgroups[{i}]"
    if not isinstance(d, dict) or set(d) != {"rel", "min", "low", "high", "sets_high"}:
        raise ValueError(f"{where}: must be an object with rel, min, low, high, sets_high")
    for key in ("min", "low"):
        if type(d[key]) is not int or d[key] < 0:
            raise ValueError(f"{where}.{key}: must be an integer >= 0, got {d[key]!r}")
    if d["high"] is not None and (type(d["high"]) is not int or d["high"] < 0):
        raise ValueError(f"{where}.high: must be null or an integer >= 0, got {d['high']!r}")
    if type(d["sets_high"]) is not bool:
        raise ValueError(f"{where}.sets_high: must be true or false, got {d['sets_high']!r}")
    try:
        rel = check_rel(d["rel"], f"{where}.rel")
    except PathOutsideRoot as err:
        raise ValueError(str(err)) from None
    return MemoryValues(rel, d["min"], d["low"], d["high"], d["sets_high"])


def decode(data: bytes, boot_id: str) -> dict[str, MemoryValues]:
    """The recorded values by cgroup; {} for another boot's record; ValueError naming what is wrong."""
    body = json.loads(data)
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"format: not {FORMAT!r}")
    if not isinstance(body.get("boot_id"), str) or not isinstance(body.get("cgroups"), list):
        raise ValueError("boot_id must be a string and cgroups a list")
    if not boot_id or body["boot_id"] != boot_id:
        return {}
    values = [_value(d, i) for i, d in enumerate(body["cgroups"])]
    return {v.rel: v for v in values}


def encode(held: Mapping[str, MemoryValues], boot_id: str) -> bytes:
    body = {"format": FORMAT, "boot_id": boot_id, "cgroups": [_entry(held[rel]) for rel in sorted(held)]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


class HeldMemoryRecord:
    """`<state file>.memqos`: read once at start, replaced whenever what the executor holds changes."""

    def __init__(self, state_path: str | Path, boot_id: str) -> None:
        state = Path(state_path)
        self.path = state.with_name(f"{state.name}.memqos")
        self._boot_id = boot_id
        self._store = StateStore(self.path)

    def load(self) -> dict[str, MemoryValues]:
        """What the run before held in this boot; {} when there is no record or it cannot be trusted."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            return decode(data, self._boot_id)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.error("memory QoS record %s is unusable (%s): values an earlier run left are not given back",
                      self.path, err)
            return {}

    def save(self, held: Mapping[str, MemoryValues]) -> None:
        """Durably replace the record (an empty `held` removes nothing: it records that nothing is held)."""
        try:
            self._store.write_bytes(encode(held, self._boot_id))
        except StateFileError as err:
            log.warning("memory QoS record not written: %s", err)
