"""The BE egress executor: owns the HTB tree on the configured device, reads it, and carries out actions.

`run(stop)` is the device's task: it opens one `AsyncIPRoute` (in the configured netns), reconciles the root
every `poll_s` (build on the kernel default; re-add missing classes of ours; a foreign root is reported and
replaced only with `own_device`, never deleted otherwise) and reads the class byte counters. `sample()` hands
the collector the last reading as a `NetworkSample` (rates over the last loop interval), so the flow stays
one-way: read → snapshot → policy → action → executor. `submit()` takes a tick's `SetBeEgressCeiling` /
`SetBeEgressSources` and applies it as a task (netlink writes are async), serialised with the reads.
At shutdown (`stop` set) the tree is removed when `remove_on_exit` is on and the root is still ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import AsyncIPRoute
from pyroute2 import config as pyroute2_config
from pyroute2.netlink.exceptions import NetlinkError

from agent.config.network import NetworkConfig
from agent.executors import htb_tree as tree
from agent.executors.cgroup_skb import BpfError, CgroupPriority
from agent.published import ActionRecord, Outcome
from agent.sources.result import PodInfo
from qos.actions import ActionKind, SetBeEgressCeiling, SetBeEgressSources
from qos.model import NetworkSample, Workload

log = logging.getLogger("coloc.network")
# pyroute2 opens a socket in a netns through a forked child and stops it with SIGTERM. Unless the child sets
# SIGTERM to its default first, the signal runs the handler it inherited from the agent's event loop, which
# writes to the loop's wakeup fd, shared with the agent: the agent read it as its own SIGTERM and stopped
# (tests/network/test_net_htb_executor.py::test_opening_the_netns_socket_never_hands_the_agent_a_sigterm).
pyroute2_config.disable_mp_signal = True

Recorder = Callable[[str, str, str, Outcome, str, Mapping[str, float]], ActionRecord]


def be_addresses(workloads: tuple[Workload, ...], pods: Mapping[str, PodInfo]) -> frozenset[str]:
    """The pod IPs of the BE workloads; never a host-network pod's (its address is the node's own)."""
    out: set[str] = set()
    for w in workloads:
        info = pods.get(w.key)
        if w.be and not w.protected and info is not None and not info.host_network:
            out.update(info.pod_ips)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Reading:
    at: float  # monotonic
    root: tree.RootState
    hp_bytes: int = 0
    be_bytes: int = 0
    be_rate_bps: int | None = None
    be_ceil_bps: int | None = None
    classified: frozenset[str] = frozenset()


class EgressShaper:
    """One device's HTB tree; built lazily by `run`, read every `poll_s`, changed by `submit`."""

    def __init__(self, cfg: NetworkConfig, window_s: float, cgroup2_mount: Path | None = None,
                 initial_ceil_bps: int | None = None) -> None:
        self.cfg = cfg
        self.window_s = window_s
        link = cfg.link_bps
        low = int(link * cfg.policy.low_share_percent / 100) // 8 * 8
        # Start with BE at its low share (rate = ceil): the policy raises it on its first reading.
        self.rates = tree.Rates(link, low, initial_ceil_bps if initial_ceil_bps is not None else low)
        self._cgroup2 = cgroup2_mount
        self._ipr: AsyncIPRoute | None = None
        self._index = 0
        self._lock = asyncio.Lock()
        self._hist: deque[Reading] = deque(maxlen=512)
        self._tasks: set[asyncio.Task[None]] = set()
        self._yarn: CgroupPriority | None = None
        self._warned: set[str] = set()
        self.owned = False
        self.removed = False  # our tree removed at the end of `run`
        self.leaf = "pfifo (HTB default)"
        self.ceiling_changes = 0
        self.errors = 0
        self.last_error = ""

    # ------------------------------------------------------------------ reading (the collector's side)

    def sample(self, be_addresses: frozenset[str]) -> NetworkSample:
        """The last reading as the snapshot carries it; rates over about one loop interval."""
        link = self.cfg.link_bps
        if not self._hist:
            return NetworkSample(link_bps=link, be_addresses=be_addresses, root="not read yet",
                                 ceiling_changes=self.ceiling_changes)
        last = self._hist[-1]
        hp = be = None
        base = next((r for r in reversed(self._hist) if r.at <= last.at - self.window_s), None)
        if base is None and len(self._hist) > 1:
            base = self._hist[0]
        ours = last.root.kind == "ours"
        if base is not None and ours and last.at > base.at and base.root.kind == "ours":
            dt = last.at - base.at
            hp = max(0.0, 8 * (last.hp_bytes - base.hp_bytes) / dt)
            be = max(0.0, 8 * (last.be_bytes - base.be_bytes) / dt)
        return NetworkSample(
            link_bps=link, hp_bps=hp, be_bps=be, be_ceil_bps=last.be_ceil_bps, be_rate_bps=last.be_rate_bps,
            owned=ours and self.owned, root=last.root.describe(), be_addresses=be_addresses,
            classified=last.classified, age_s=max(0.0, time.monotonic() - last.at),
            ceiling_changes=self.ceiling_changes)

    async def read(self) -> Reading:
        """Root state, class counters and BE filters, as the kernel holds them now."""
        ipr = self._require()
        root = await tree.root_state(ipr, self._index)
        if root.kind != "ours":
            return Reading(time.monotonic(), root)
        cls = await tree.classes(ipr, self._index)
        filters = await tree.be_filters(ipr, self._index)
        at = time.monotonic()
        hp, be = cls.get(tree.HP), cls.get(tree.BE)
        if hp is None or be is None:
            return Reading(at, tree.RootState("degraded", root.qdisc, root.handle))
        return Reading(at, root, hp.bytes, be.bytes, be.rate_bps, be.ceil_bps,
                       frozenset(str(a) for a in filters))

    # ------------------------------------------------------------------ the device's task

    async def open(self) -> None:
        kwargs: dict[str, object] = {"ext_ack": True, "strict_check": True}
        if self.cfg.netns:
            kwargs.update(netns=self.cfg.netns, flags=0)  # flags=0: a wrong name fails, is never created
        self._ipr = AsyncIPRoute(**kwargs)  # the socket (and the netns) is opened by the first request
        found = await self._ipr.link_lookup(ifname=self.cfg.device)
        if not found:
            await self.close()
            where = f" in netns {self.cfg.netns}" if self.cfg.netns else ""
            raise LookupError(f"network.device: no interface {self.cfg.device!r}{where}")
        self._index = found[0]

    async def close(self) -> None:
        if self._ipr is not None:
            ipr, self._ipr = self._ipr, None
            try:
                ipr.close()
            except Exception as err:  # closing a netlink socket that failed: said, then forgotten
                log.warning("closing the netlink socket failed", extra={"fields": {"error": repr(err)}})

    def _require(self) -> AsyncIPRoute:
        if self._ipr is None:
            raise RuntimeError("the egress shaper is not open")
        return self._ipr

    async def reconcile(self) -> Reading:
        """Bring the root in line (under the lock) and read it back."""
        async with self._lock:
            ipr = self._require()
            root = await tree.root_state(ipr, self._index)
            if root.kind == "default":
                await self._build(replace=False)
            elif root.kind == "ours":
                if not self.owned:  # our previous incarnation's tree: the root handle is the record
                    await self._adopt(ipr)  # a failure is tried again at the next reconcile
                    self.owned = True
            elif root.kind == "degraded" and self.owned:
                added = await tree.repair(ipr, self._index, self.rates)
                log.warning("egress: classes of our tree were missing, re-added: %s",
                            ", ".join(tree.fmt_handle(c) for c in added))
            else:
                await self._foreign(root)
            self._attach_yarn()
            reading = await self.read()
        self._hist.append(reading)
        return reading

    async def _adopt(self, ipr: AsyncIPRoute) -> None:
        """Take over the tree an earlier run left: its classes get this run's rates in place (counters
        kept) where its link rate is not this config's (`link_mbit` changed across the restart)."""
        link = (await tree.classes(ipr, self._index)).get(tree.LINK)
        found = link.rate_bps if link is not None else None
        if found is not None and abs(found - self.rates.link_bps) > self.rates.link_bps // 1000:
            for cls in (tree.LINK, tree.HP, tree.BE):  # parent first
                await tree.change_class(ipr, self._index, cls, self.rates)
        log.info("egress: adopted our existing HTB tree on %s", self.cfg.device, extra={"fields": {
            "link_bps_found": found, "link_bps": self.rates.link_bps}})

    async def _foreign(self, root: tree.RootState) -> None:
        note = f"foreign root qdisc {root.qdisc} {tree.fmt_handle(root.handle)} on {self.cfg.device}"
        if self.owned:
            log.warning("egress: our tree was replaced by another component",
                        extra={"fields": {"root": root.describe()}})
            self.owned = False
        if not self.cfg.own_device:
            if note not in self._warned:
                self._warned.add(note)
                log.warning("egress: %s; not shaping (network.own_device is off)", note)
            return
        log.warning("egress: %s; replacing it (network.own_device)", note)
        ipr = self._require()
        if root.handle == tree.ROOT:  # an htb with our handle cannot be "replace"d by htb: delete, then add
            await tree.remove(ipr, self._index)
            await self._build(replace=False)
        else:
            await self._build(replace=True)

    async def _build(self, replace: bool) -> None:
        ipr = self._require()
        await tree.build(ipr, self._index, self.rates, replace)
        self.owned = True
        if self.cfg.leaf != "none":
            try:
                await tree.add_leaves(ipr, self._index, self.cfg.leaf)
                self.leaf = self.cfg.leaf
            except NetlinkError as err:
                self.leaf = f"pfifo (HTB default; {self.cfg.leaf} unavailable: {err})"
        log.info("egress: built our HTB tree", extra={"fields": {
            "device": self.cfg.device, "link_bps": self.rates.link_bps, "be_rate_bps": self.rates.be_rate_bps,
            "be_ceil_bps": self.rates.be_ceil_bps, "leaf": self.leaf}})

    def _attach_yarn(self) -> None:
        """The cgroup classifier for YARN, once its cgroup2 directory exists."""
        if not self.cfg.yarn_cgroup2 or self._yarn is not None or not self.owned:
            return
        if self._cgroup2 is None:
            self._warn_once("egress: network.yarn_cgroup2 is set but this host has no cgroup2 mount")
            return
        path = self._cgroup2 / self.cfg.yarn_cgroup2.strip("/")
        if not path.is_dir():
            self._warn_once(f"egress: YARN cgroup2 directory {path} does not exist (yet)")
            return
        try:
            self._yarn = CgroupPriority(str(path), tree.BE)
        except (BpfError, OSError) as err:
            self._warn_once(f"egress: cannot classify YARN by cgroup at {path}: {err}")
            return
        log.info("egress: YARN sockets classified BE by cgroup", extra={"fields": {
            "cgroup": str(path), "left_by_an_earlier_run_replaced": self._yarn.replaced}})

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning(text)

    async def remove(self) -> bool:
        """Delete our tree if the root is still ours; never anything else."""
        async with self._lock:
            if self._yarn is not None:
                with contextlib.suppress(BpfError, OSError):
                    self._yarn.detach()
                self._yarn = None
            ipr = self._require()
            root = await tree.root_state(ipr, self._index)
            if not self.owned or root.kind not in ("ours", "degraded"):
                log.info("egress: not removing the root qdisc (%s): not ours", root.describe())
                return False
            await tree.remove(ipr, self._index)
            self.owned = False
            return True

    async def remove_left(self) -> bool:
        """Delete a tree an earlier run left (its root handle says it is ours; a run with network control
        off calls this once): True when there was one; a foreign root is never touched."""
        async with self._lock:
            root = await tree.root_state(self._require(), self._index)
            if root.kind not in ("ours", "degraded"):
                log.info("egress: no tree of ours left on %s (%s)", self.cfg.device, root.describe())
                return False
            await tree.remove(self._require(), self._index)
            log.info("egress: removed the tree an earlier run left on %s (network control is off)",
                     self.cfg.device)
            return True

    async def run(self, stop: asyncio.Event) -> None:
        """Open, then reconcile and read every `poll_s` until `stop`; remove (if configured) and close."""
        try:
            await self.open()
        except (LookupError, NetlinkError, OSError) as err:
            self._failed("open", err)
            log.error("egress: cannot open %s: %s; BE egress is not shaped", self.cfg.device, err)
            return
        try:
            while not stop.is_set():
                try:
                    await self.reconcile()
                except (NetlinkError, OSError) as err:
                    self._failed("reconcile", err)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.cfg.poll_s)
        finally:
            await self.drain()
            if self.cfg.remove_on_exit:
                try:
                    self.removed = await self.remove()
                except (NetlinkError, OSError) as err:
                    self._failed("remove", err)
            await self.close()

    def _failed(self, what: str, err: Exception) -> None:
        self.errors += 1
        self.last_error = f"{what}: {err}"
        log.warning("egress: %s failed: %s", what, err)

    # ------------------------------------------------------------------ actions (the executor's side)

    def submit(self, action: SetBeEgressCeiling | SetBeEgressSources, dry_run: bool,
               record: Recorder) -> ActionRecord:
        """Start applying `action` as a task; the record says it was started (or only recorded)."""
        if isinstance(action, SetBeEgressCeiling):
            kind, target, numbers = ActionKind.SET_BE_EGRESS_CEILING, str(action.ceil_bps), action.numbers
        else:
            kind, target, numbers = ActionKind.SET_BE_EGRESS_SOURCES, ",".join(sorted(action.addresses)), {}
        if dry_run:
            return record("network", kind, target, Outcome.DRY_RUN, action.reason, numbers)
        if self._ipr is None:
            return record("network", kind, target, Outcome.SKIPPED, "the egress shaper is not open", numbers)
        task = asyncio.get_running_loop().create_task(self._apply(action))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record("network", kind, target, Outcome.STARTED, action.reason, numbers)

    async def _apply(self, action: SetBeEgressCeiling | SetBeEgressSources) -> None:
        try:
            async with self._lock:
                if not self.owned:
                    return  # a foreign root: nothing of ours to change
                if isinstance(action, SetBeEgressCeiling):
                    await self.set_ceiling(action.ceil_bps, action.rate_bps)
                else:
                    await self.set_sources(action.addresses)
        except (NetlinkError, OSError, ValueError) as err:
            self._failed(type(action).__name__, err)

    async def set_ceiling(self, ceil_bps: int, rate_bps: int) -> None:
        """Change the BE class in place (the caller holds the lock, or nothing else runs)."""
        rate_bps = min(rate_bps, self.rates.link_bps // 2)
        new = tree.Rates(self.rates.link_bps, rate_bps, max(min(ceil_bps, self.rates.link_bps), rate_bps))
        changed = new.be_rate_bps != self.rates.be_rate_bps
        await tree.set_be(self._require(), self._index, new, rate_changed=changed)
        self.rates = new
        self.ceiling_changes += 1

    async def set_sources(self, addresses: frozenset[str]) -> tuple[list[str], list[str]]:
        want = {ipaddress.ip_address(a) for a in addresses}
        added, removed = await tree.set_be_sources(self._require(), self._index, want)
        if added or removed:
            log.info("egress: BE sources", extra={"fields": {"added": added, "removed": removed}})
        return added, removed

    async def drain(self) -> None:
        """Wait for the action tasks in flight."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
