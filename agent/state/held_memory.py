"""Memory values the agent has put in place, recorded beside the state file (`agent/state/held_record.py`).

`<state>.memqos`, memory QoS: the next run of the same boot takes as its own each recorded cgroup whose
`memory.min` / `memory.low` (and a container's `memory.high`) still read as recorded
(`ResourceQosExecutor.adopt_memory`), so memory QoS turned off while the agent was down is given back there,
and nowhere the kubelet's MemoryQoS gate (which writes the same files) has written since.
`<state>.tiercap`, the BE tier's memory cap: taken as the agent's when the tier's limits still read as one of
the recorded caps (`TierMemoryExecutor.adopt`), so a run with the cap off lifts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.state.held_record import HeldRecord, checked_rel, optional_bytes
from qos.memory_qos import MemoryValues
from qos.tier_memory import TierCap

Held = dict[str, tuple[MemoryValues, ...]]  # cgroup -> the values that may be in place there (the one held,
# and, recorded before a change is written, the next one)


def _value(d: Any, i: int) -> MemoryValues:
    where = f"cgroups[{i}]"
    if not isinstance(d, dict) or set(d) != {"rel", "min", "low", "high", "sets_high"}:
        raise ValueError(f"{where}: must be an object with rel, min, low, high, sets_high")
    for key in ("min", "low"):
        if type(d[key]) is not int or d[key] < 0:
            raise ValueError(f"{where}.{key}: must be an integer >= 0, got {d[key]!r}")
    high = optional_bytes(d["high"], f"{where}.high")
    if type(d["sets_high"]) is not bool:
        raise ValueError(f"{where}.sets_high: must be true or false, got {d['sets_high']!r}")
    return MemoryValues(checked_rel(d["rel"], f"{where}.rel"), d["min"], d["low"], high, d["sets_high"])


class MemoryCodec:
    format = "coloc-agent/memory-qos/v1"
    key = "cgroups"
    what = "memory QoS"

    def empty(self) -> Held:
        return {}

    def encode(self, value: Mapping[str, tuple[MemoryValues, ...]]) -> Any:
        return [{"rel": v.rel, "min": v.min_bytes, "low": v.low_bytes, "high": v.high_bytes,
                 "sets_high": v.sets_high} for rel in sorted(value) for v in value[rel]]

    def decode(self, payload: Any) -> Held:
        if not isinstance(payload, list):
            raise ValueError("cgroups: must be a list")
        held: Held = {}
        for i, d in enumerate(payload):  # a cgroup may be named twice: before and after a change
            v = _value(d, i)
            held[v.rel] = (*held.get(v.rel, ()), v)
        return held


FORMAT = MemoryCodec.format


def memory_record(state_path: str | Path, boot_id: str) -> HeldRecord[Held]:
    """`<state file>.memqos`."""
    return HeldRecord(state_path, "memqos", boot_id, MemoryCodec())


HeldCaps = tuple[str, tuple[TierCap, ...]] | None  # the tier's cgroup and the caps that may be ours there


def _cap(d: Any, i: int) -> TierCap:
    where = f"tier_cap.caps[{i}]"
    if not isinstance(d, dict) or set(d) != {"high", "max"}:
        raise ValueError(f"{where}: must be an object with high, max")
    return TierCap(optional_bytes(d["high"], f"{where}.high"), optional_bytes(d["max"], f"{where}.max"))


class TierCapCodec:
    """The BE tier's memory cap: null (none of ours), or the tier and the caps that may be in place (the one
    held, and, recorded before a change is written, the one about to be)."""

    format = "coloc-agent/tier-cap/v1"
    key = "tier_cap"
    what = "BE tier memory cap"

    def empty(self) -> HeldCaps:
        return None

    def encode(self, value: HeldCaps) -> Any:
        if value is None:
            return None
        rel, caps = value
        return {"rel": rel, "caps": [{"high": c.high_bytes, "max": c.max_bytes} for c in caps]}

    def decode(self, payload: Any) -> HeldCaps:
        if payload is None:
            return None
        caps = payload.get("caps") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or set(payload) != {"rel", "caps"} or not isinstance(caps, list):
            raise ValueError("tier_cap: must be null or an object with rel and a list caps")
        return checked_rel(payload["rel"], "tier_cap.rel"), tuple(_cap(d, i) for i, d in enumerate(caps))


def tier_cap_record(state_path: str | Path, boot_id: str) -> HeldRecord[HeldCaps]:
    """`<state file>.tiercap`."""
    return HeldRecord(state_path, "tiercap", boot_id, TierCapCodec())
