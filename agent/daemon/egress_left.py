"""An egress tree (and YARN's cgroup_skb program) a run left on a device, removed by a run with network
control off, or by one that shapes another device (or YARN directory) now.

A run that shapes egress records where at start (`<state>.egress`, agent/state/held_be.py); a clean exit
that removed its tree clears the record. A run with `network.enabled: false` that finds a record of this boot
removes the tree there if its root is still ours (the root handle `c01c:` is the tree's own record: a foreign
root is never touched), detaches our programs from the recorded YARN directory, and clears the record. A
SIGKILLed run removes nothing: before, its tree held HP's ceiling at the old link rate and BE's at the last
ceiling for good, and a pod address reused by an HP pod went on into BE's class.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from agent.config.network import NetworkConfig
from agent.state.held_be import egress_record
from agent.state.held_record import HeldRecord
from agent.state.ledger import read_boot_id

if TYPE_CHECKING:
    from agent.executors.htb import EgressShaper

log = logging.getLogger("coloc.network")


async def remove_left(where: NetworkConfig, cgroup2: Path | None, *, tree: bool = True,
                      yarn: bool = True) -> bool:
    """Remove what a run that shaped `where` left: the tree on its device if its root is still ours (`tree`),
    our programs on its YARN directory (`yarn`). False when it could not be done (tried at the next start)."""
    from pyroute2.netlink.exceptions import NetlinkError  # only when there is something to remove

    from agent.executors.cgroup_skb import BpfError, detach_left_at
    from agent.executors.htb import EgressShaper

    if tree:
        shaper = EgressShaper(where, 1.0, cgroup2)
        try:
            await shaper.open()
            await shaper.remove_left()
        except LookupError:
            log.info("egress: the device %s an earlier run shaped is gone, its tree with it", where.device)
        except (NetlinkError, OSError) as err:
            log.warning("egress: the tree an earlier run left on %s could not be removed: %s",
                        where.device, err)
            return False
        finally:
            await shaper.close()
    path = where.yarn_cgroup2.strip("/")  # as the shaper joins it: inside the mount (no '..', checked)
    if yarn and path and cgroup2 is not None and (cgroup2 / path).is_dir():
        try:
            if detach_left_at(str(cgroup2 / path)):
                log.info("egress: YARN's classifier an earlier run left detached")
        except (BpfError, OSError) as err:
            log.warning("egress: YARN's classifier an earlier run left could not be detached: %s", err)
            return False
    return True


async def _left(record: HeldRecord[NetworkConfig | None], cgroup2: Path | None) -> None:
    """Where network control is off: what the recorded run left, then the record cleared."""
    where = await asyncio.to_thread(record.load)
    if where is not None and await remove_left(where, cgroup2):
        await asyncio.to_thread(record.save, None)


class LeftEgress:
    """The record across the run: written at start where network control is on, cleared at exit once the
    tree is removed; where it is off, what an earlier run left is removed in a task of its own."""

    def __init__(self, state_path: str, network: NetworkConfig, cgroup2: Path | None) -> None:
        self._record = egress_record(state_path, read_boot_id()) if state_path else None
        self._network = network
        self._cgroup2 = cgroup2
        self._task: asyncio.Task[object] | None = None

    def start(self) -> None:
        """Before the shaper runs (file I/O with fsync, once)."""
        if self._record is None:
            return
        if not self._network.enabled:
            self._task = asyncio.create_task(_left(self._record, self._cgroup2))
            return
        old, new = self._record.load(), self._network
        self._record.save(new)  # where this run's tree is, before it is built
        if old is not None:  # the device or YARN's directory changed: what is left on the old one goes
            moved = (old.device, old.netns) != (new.device, new.netns)
            if moved or old.yarn_cgroup2 != new.yarn_cgroup2:
                self._task = asyncio.create_task(remove_left(old, self._cgroup2, tree=moved,
                                                             yarn=old.yarn_cgroup2 != new.yarn_cgroup2))

    async def exit(self, shaper: EgressShaper | None) -> None:
        """After the shaper's task ended."""
        if self._task is not None:
            try:
                await self._task
            except Exception:
                log.warning("removing an egress tree an earlier run left failed", exc_info=True)
        if self._record is not None and shaper is not None and shaper.removed:
            await asyncio.to_thread(self._record.save, None)
