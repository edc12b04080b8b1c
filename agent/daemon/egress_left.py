"""An egress tree (and YARN's cgroup_skb program) a run left on a device, removed by a run with network
control off, or by one that shapes another device (or YARN directory) now.

A run that shapes egress marks where at start (the mark `egress` in the journal of holdings,
`cgroups/holdings.py`); a clean exit that removed its tree clears the mark. A run with `network.enabled:
false` that finds a mark of this boot removes the tree there if its root is still ours (the root handle
`c01c:` is the tree's own mark: a foreign root is never touched), detaches our programs from the marked YARN
directory, and clears the mark. A SIGKILLed run removes nothing: before, its tree held HP's ceiling at the
old link rate and BE's at the last ceiling for good, and a pod address reused by an HP pod went on into BE's
class.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.config.load import ConfigError
from agent.config.network import NetworkConfig
from cgroups.holdings import Journal

if TYPE_CHECKING:
    from agent.executors.htb import EgressShaper

log = logging.getLogger("coloc.network")
MARK = "egress"


def encode(where: NetworkConfig) -> dict[str, Any]:
    """Where a run shapes: the device, its netns and the YARN cgroup2 directory (the mark's data)."""
    return {"device": where.device, "netns": where.netns, "yarn_cgroup2": where.yarn_cgroup2}


def decode(data: Any) -> NetworkConfig:
    """A mark's place, checked as the config checks it; ValueError naming what is wrong."""
    if not isinstance(data, dict) or set(data) != {"device", "netns", "yarn_cgroup2"}:
        raise ValueError("egress: must be an object with device, netns, yarn_cgroup2")
    try:  # the mark can only name what a config could: an interface name, a netns name, a cgroup2 path
        return NetworkConfig(enabled=True, device=data["device"], netns=data["netns"], link_mbit=1.0,
                             leaf="none", yarn_cgroup2=data["yarn_cgroup2"])
    except (ConfigError, TypeError, AttributeError) as err:
        raise ValueError(f"egress: {err}") from None


def left(journal: Journal) -> NetworkConfig | None:
    """Where an earlier run of this boot shaped and did not clean up (a damaged mark: nowhere, said)."""
    data = journal.marks_left.get(MARK)
    if data is None:
        return None
    try:
        return decode(data)
    except ValueError as err:
        log.error("egress: the mark an earlier run left is unusable (%s): its tree is not removed", err)
        journal.unmark(MARK)
        return None


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


async def _left(journal: Journal, where: NetworkConfig, cgroup2: Path | None) -> None:
    """Where network control is off: what the marked run left, then the mark cleared."""
    if await remove_left(where, cgroup2):
        journal.unmark(MARK)


class LeftEgress:
    """The mark across the run: made at start where network control is on, cleared at exit once the tree is
    removed; where it is off, what an earlier run left is removed in a task of its own."""

    def __init__(self, journal: Journal, network: NetworkConfig, cgroup2: Path | None) -> None:
        self._journal = journal
        self._network = network
        self._cgroup2 = cgroup2
        self._task: asyncio.Task[object] | None = None

    def start(self) -> None:
        """Before the shaper runs."""
        old, new = left(self._journal), self._network
        if not new.enabled:
            if old is not None:
                self._task = asyncio.create_task(_left(self._journal, old, self._cgroup2))
            return
        self._journal.mark(MARK, encode(new))  # where this run's tree is, before it is built
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
        if shaper is not None and shaper.removed:
            self._journal.unmark(MARK)
