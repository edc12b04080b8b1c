"""An egress tree (and YARN's cgroup_skb program) a run left on a device, removed by a run with network
control off.

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


async def remove_left(record: HeldRecord[NetworkConfig | None], cgroup2: Path | None) -> bool:
    """Once, at start, where network control is off; True when a tree was removed."""
    where = await asyncio.to_thread(record.load)
    if where is None:
        return False
    from pyroute2.netlink.exceptions import NetlinkError  # only when there is something to remove

    from agent.executors.cgroup_skb import BpfError, detach_left_at
    from agent.executors.htb import EgressShaper

    removed = False
    shaper = EgressShaper(where, 1.0, cgroup2)
    try:
        await shaper.open()
        removed = await shaper.remove_left()
    except LookupError:
        log.info("egress: the device %s an earlier run shaped is gone, and its tree with it", where.device)
    except (NetlinkError, OSError) as err:
        log.warning("egress: the tree an earlier run left on %s could not be removed: %s", where.device, err)
        return False
    finally:
        await shaper.close()
    if where.yarn_cgroup2 and cgroup2 is not None and (cgroup2 / where.yarn_cgroup2).is_dir():
        try:
            if detach_left_at(str(cgroup2 / where.yarn_cgroup2)):
                log.info("egress: YARN's classifier an earlier run left detached")
        except (BpfError, OSError) as err:
            log.warning("egress: YARN's classifier an earlier run left could not be detached: %s", err)
    await asyncio.to_thread(record.save, None)
    return removed


class LeftEgress:
    """The record across the run: written at start where network control is on, cleared at exit once the
    tree is removed; where it is off, what an earlier run left is removed in a task of its own."""

    def __init__(self, state_path: str, network: NetworkConfig, cgroup2: Path | None) -> None:
        self._record = egress_record(state_path, read_boot_id()) if state_path else None
        self._network = network
        self._cgroup2 = cgroup2
        self._task: asyncio.Task[bool] | None = None

    def start(self) -> None:
        """Before the shaper runs (file I/O with fsync, once)."""
        if self._record is None:
            return
        if self._network.enabled:
            self._record.save(self._network)  # where this run's tree is, before it is built
        else:
            self._task = asyncio.create_task(remove_left(self._record, self._cgroup2))

    async def exit(self, shaper: EgressShaper | None) -> None:
        """After the shaper's task ended."""
        if self._task is not None:
            try:
                await self._task
            except Exception:
                log.warning("removing an egress tree an earlier run left failed", exc_info=True)
        if self._record is not None and shaper is not None and shaper.removed:
            await asyncio.to_thread(self._record.save, None)
