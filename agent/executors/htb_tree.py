"""The HTB tree on one egress device, through pyroute2's async API: build, read back, filter, change, remove.

    root qdisc  c01c:    htb default 0x10         unclassified traffic (ARP included) -> HP
      class     c01c:1   link  rate = ceil = link capacity
        class   c01c:10  HP    rate = link - BE rate, ceil = link, prio 0   (the default class)
        class   c01c:20  BE    rate = BE rate, ceil = dynamic, prio 7
      filters on c01c: : u32 prio 10 IPv4 "src == a/32" -> c01c:20; u32 prio 11 IPv6 "src == a/128" -> c01c:20

The distinctive root handle is the record that the tree is ours: a root `htb c01c: default 10` holding
these three classes was made by this agent (or its previous incarnation) and is adopted; anything else at
the root is foreign. pyroute2 0.9.7 pitfalls handled here (measured): an int rate is bytes/s; a filter
delete needs kind, prio, protocol, handle and target or the kernel flushes every filter of the parent;
u32 keys read back garbled, so they are decoded from the raw selector; the ethertype must be ETH_P_IP /
ETH_P_IPV6 (AF_INET is accepted and never matches); IPv4 and IPv6 filters need different prios; a
`change-class` is a full replace of the HTB parameters; a class under a missing parent lands at the top
level, so classes are re-added parent first.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Any

from pyroute2 import AsyncIPRoute, protocols

TC_H_ROOT = 0xFFFFFFFF
MAJOR = 0xC01C


def handle(major: int, minor: int) -> int:
    return (major << 16) | minor


def fmt_handle(value: int) -> str:
    return f"{value >> 16:x}:{value & 0xFFFF:x}"


ROOT = handle(MAJOR, 0)
LINK = handle(MAJOR, 1)
HP = handle(MAJOR, 0x10)
BE = handle(MAJOR, 0x20)
PRIO_V4, PRIO_V6 = 10, 11
HP_PRIO, BE_PRIO = 0, 7
QUANTUM = 60000  # explicit: the r2q default gives rate/10 and the kernel's "quantum is big" warning
LEAF_KINDS = ("fq_codel",)  # only kinds pyroute2 has a plugin for: any other silently goes to the root

IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class RootState:
    """The device's root qdisc: `default` (the kernel's own, handle 0), `ours`, `degraded` (our root with a
    class missing) or `foreign`."""

    kind: str
    qdisc: str = ""
    handle: int = 0

    def describe(self) -> str:
        return f"{self.kind} {self.qdisc} {fmt_handle(self.handle)}".strip()


@dataclass(frozen=True, slots=True)
class ClassReading:
    bytes: int
    packets: int
    drops: int
    rate_bps: int
    ceil_bps: int


@dataclass(frozen=True, slots=True)
class Rates:
    """The HTB rates (bits/s) of the three classes for a given link and BE rate/ceiling."""

    link_bps: int
    be_rate_bps: int
    be_ceil_bps: int


async def root_state(ipr: AsyncIPRoute, index: int) -> RootState:
    roots = [q async for q in await ipr.get_qdiscs(index=index) if q["parent"] == TC_H_ROOT]
    if not roots:
        return RootState("default")
    q = roots[0]
    kind = str(q.get_attr("TCA_KIND") or "")
    if q["handle"] == 0:  # kernel defaults (noqueue, mq, pfifo_fast) have handle 0:
        return RootState("default", kind)
    if kind != "htb" or q["handle"] != ROOT:
        return RootState("foreign", kind, q["handle"])
    init = q.get_nested("TCA_OPTIONS", "TCA_HTB_INIT") or {}
    if init.get("defcls") != 0x10:
        return RootState("foreign", kind, q["handle"])
    classes = {c["handle"] async for c in await ipr.get_classes(index=index)}
    return RootState("ours" if {LINK, HP, BE} <= classes else "degraded", kind, q["handle"])


async def _add_class(ipr: AsyncIPRoute, index: int, cls: int, rates: Rates, op: str = "add-class") -> None:
    link, be_rate = rates.link_bps // 8, rates.be_rate_bps // 8
    if cls == LINK:
        await ipr.tc(op, "htb", index, LINK, parent=ROOT, rate=link, ceil=link, quantum=QUANTUM)
    elif cls == HP:
        await ipr.tc(op, "htb", index, HP, parent=LINK, rate=link - be_rate, ceil=link, prio=HP_PRIO,
                     quantum=QUANTUM)
    else:
        await ipr.tc(op, "htb", index, BE, parent=LINK, rate=be_rate, ceil=rates.be_ceil_bps // 8,
                     prio=BE_PRIO, quantum=QUANTUM)


async def build(ipr: AsyncIPRoute, index: int, rates: Rates, replace: bool) -> None:
    """Our root and its classes; `replace` swaps a foreign root out atomically (the device is ours)."""
    await ipr.tc("replace" if replace else "add", "htb", index, ROOT, default=0x10)
    for cls in (LINK, HP, BE):
        await _add_class(ipr, index, cls, rates)


async def repair(ipr: AsyncIPRoute, index: int, rates: Rates) -> list[int]:
    """Re-add the classes missing under our root, parent first; return them."""
    have = {c["handle"] async for c in await ipr.get_classes(index=index)}
    missing = [c for c in (LINK, HP, BE) if c not in have]
    for cls in missing:
        await _add_class(ipr, index, cls, rates)
    return missing


async def add_leaves(ipr: AsyncIPRoute, index: int, kind: str) -> None:
    """A leaf qdisc under HP and BE; raises NetlinkError when the kernel lacks the kind."""
    if kind not in LEAF_KINDS:
        raise ValueError(f"leaf qdisc {kind!r} is not one this executor may pass to pyroute2")
    for cls in (HP, BE):
        await ipr.tc("add", kind, index, handle(cls & 0xFFFF, 0), parent=cls)


async def change_class(ipr: AsyncIPRoute, index: int, cls: int, rates: Rates) -> None:
    """One class's rates in place (its byte counters kept)."""
    await _add_class(ipr, index, cls, rates, op="change-class")


async def set_be(ipr: AsyncIPRoute, index: int, rates: Rates, rate_changed: bool) -> None:
    """The BE class's rate and ceiling in place (byte counters kept); HP's rate too when BE's changed."""
    await _add_class(ipr, index, BE, rates, op="change-class")
    if rate_changed:
        await _add_class(ipr, index, HP, rates, op="change-class")


async def remove(ipr: AsyncIPRoute, index: int) -> None:
    """Delete our root: classes, leaves and filters go with it and the kernel default comes back."""
    await ipr.tc("del", index=index, handle=ROOT, parent=TC_H_ROOT)


async def classes(ipr: AsyncIPRoute, index: int) -> dict[int, ClassReading]:
    out: dict[int, ClassReading] = {}
    async for c in await ipr.get_classes(index=index):
        stats = c.get_attr("TCA_STATS2")
        if stats is None:
            continue
        basic, queue = stats.get_attr("TCA_STATS_BASIC"), stats.get_attr("TCA_STATS_QUEUE")
        parms = c.get_nested("TCA_OPTIONS", "TCA_HTB_PARMS") or {}
        rate64 = c.get_nested("TCA_OPTIONS", "TCA_HTB_RATE64")
        ceil64 = c.get_nested("TCA_OPTIONS", "TCA_HTB_CEIL64")
        out[c["handle"]] = ClassReading(
            bytes=basic["bytes"], packets=basic["packets"], drops=queue["drops"] if queue else 0,
            rate_bps=8 * (rate64 or parms.get("rate", 0)), ceil_bps=8 * (ceil64 or parms.get("ceil", 0)))
    return out


def u32_keys(addr: IPAddr) -> list[str]:
    """u32 keys "value/mask+offset" matching the source address (offsets in bytes into the IP header)."""
    if addr.version == 4:
        return [f"0x{int(addr):08x}/0xffffffff+12"]
    a = int(addr)
    return [f"0x{(a >> (96 - 32 * i)) & 0xFFFFFFFF:08x}/0xffffffff+{8 + 4 * i}" for i in range(4)]


def decode_src(f: Any) -> IPAddr | None:
    """The source address a u32 filter of ours matches, parsed from the raw `tc_u32_key`s: pyroute2 0.9.7
    decodes the keys 4 bytes early (from selector+16, while it encodes them at +20)."""
    sel = f.get_nested("TCA_OPTIONS", "TCA_U32_SEL")
    if sel is None or not sel["nkeys"]:
        return None
    base = sel.offset + 4 + 16  # the attribute header, then struct tc_u32_sel
    words: dict[int, int] = {}
    for i in range(sel["nkeys"]):
        mask, val = struct.unpack_from(">II", sel.data, base + 16 * i)
        (off,) = struct.unpack_from("=i", sel.data, base + 16 * i + 8)
        if mask != 0xFFFFFFFF:
            return None
        words[off] = val
    if set(words) == {12}:
        return ipaddress.IPv4Address(words[12])
    if set(words) == {8, 12, 16, 20}:
        return ipaddress.IPv6Address(b"".join(struct.pack(">I", words[o]) for o in (8, 12, 16, 20)))
    return None


async def be_filters(ipr: AsyncIPRoute, index: int) -> dict[IPAddr, tuple[int, int, int]]:
    """Source address -> (prio, ethertype, u32 handle) of the BE filters the kernel holds."""
    out: dict[IPAddr, tuple[int, int, int]] = {}
    async for f in await ipr.get_filters(index=index, parent=ROOT):
        prio, proto = f["info"] >> 16, socket.ntohs(f["info"] & 0xFFFF)
        if f.get_attr("TCA_KIND") != "u32" or prio not in (PRIO_V4, PRIO_V6):
            continue
        if f.get_nested("TCA_OPTIONS", "TCA_U32_CLASSID") != BE:
            continue  # the hash-table entries (handle 0 and 8xx:) carry no class
        addr = decode_src(f)
        if addr is not None:
            out[addr] = (prio, proto, f["handle"])
    return out


async def set_be_sources(ipr: AsyncIPRoute, index: int, want: set[IPAddr]) -> tuple[list[str], list[str]]:
    """Make the BE filters match exactly `want`, against a dump of the kernel's; return (added, removed)."""
    have = await be_filters(ipr, index)
    added, removed = [], []
    for a in sorted(want - set(have), key=str):
        prio, proto = (PRIO_V4, protocols.ETH_P_IP) if a.version == 4 else (PRIO_V6, protocols.ETH_P_IPV6)
        await ipr.tc("add-filter", "u32", index, parent=ROOT, prio=prio, protocol=proto, target=BE,
                     keys=u32_keys(a))
        added.append(str(a))
    for a in sorted(set(have) - want, key=str):
        prio, proto, fh = have[a]
        await ipr.tc("del-filter", "u32", index, parent=ROOT, prio=prio, protocol=proto, handle=fh, target=BE)
        removed.append(str(a))
    return added, removed
