"""The writer's side of the journal of holdings (`cgroups/holdings.py`): journal a knob before it changes
owner, give back what an earlier run held and this one does not (`settle`), release a moving holder's knobs.

A mixin of `CgroupWriter` (cgroups/writer.py): it uses the writer's read-compare-write (`_set`), paths and
systemd units, declared below for the type checker.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from cgroups.discovery import Hierarchy
from cgroups.errors import CgroupError, CgroupGone
from cgroups.holdings import Holder, Holding, Journal
from cgroups.knobs import CPUSET, IDLE, Knob, knob_named

if TYPE_CHECKING:
    from cgroups.systemd import SystemdUnits

log = logging.getLogger("coloc.cgroups")
V = TypeVar("V")
PRUNE_AT = 512  # holdings in the journal before the first look for cgroups that are gone


class HoldingWriter:
    hierarchy: Hierarchy
    units: SystemdUnits | None
    journal: Journal
    _holder: Holder | None
    _prune_at: int
    _refused: set[tuple[str, str]]

    def _set(self, knob: Knob[V], rel: str, wanted: V) -> bool:
        raise NotImplementedError

    def set_cpuset(self, rel: str, cpus: Iterable[int], *, descendants: bool = False) -> bool:
        raise NotImplementedError

    def path(self, ctrl: str, rel: str, name: str = "") -> str:
        raise NotImplementedError

    def read(self, ctrl: str, rel: str, name: str) -> bytes:
        raise NotImplementedError

    def write(self, ctrl: str, rel: str, name: str, value: str) -> None:
        raise NotImplementedError

    def _systemd_holds(self, knob: Knob[Any]) -> bool:
        raise NotImplementedError

    @contextlib.contextmanager
    def held_by(self, holder: Holder) -> Iterator[None]:
        """The knobs set inside are `holder`'s holdings (journaled before they change). Synchronous code only:
        an await inside would lend the holder to another task's writes."""
        before, self._holder = self._holder, holder
        try:
            yield
        finally:
            self._holder = before

    def _hold(self, knob: Knob[V], rel: str, current: V, wanted: V) -> bool:
        """Journal the holding before its knob is written; True when `wanted` gives the knob back (the holding
        ends once it is written)."""
        h = self._holder
        key = (knob.name, rel)
        old = self.journal.held.get(key)
        if h is None:
            return False
        if old is None:
            ours = None if h.moving else (knob.dump(wanted),)
            give_back = self._above(knob, rel, h) if h.moving else None
            self.journal.hold(Holding(knob.name, rel, h.name,
                                      knob.dump(current) if give_back is None else give_back, ours))
            if len(self.journal.held) > self._prune_at:
                self._prune()
            return False
        if h.moving:  # held until the holder releases it (`release`): its values come and go every tick
            if old.holder != h.name:
                self.journal.hold(Holding(knob.name, rel, h.name, old.give_back, None))
            return False
        if knob.equal(knob.load(old.give_back), wanted):
            return True
        ours = None
        if not h.moving:
            was = old.ours is not None and any(knob.equal(current, knob.load(o)) for o in old.ours)
            new = knob.dump(wanted)
            ours = (*([knob.dump(current)] if was and not knob.equal(current, wanted) else []), new)
        self.journal.hold(Holding(knob.name, rel, h.name, old.give_back, ours))
        return False

    def _claim(self, knob: Knob[Any], rel: str, h: Holder) -> None:
        """The holder wants the knob as it is: an inherited holding is this run's again; for a moving holder,
        a cgroup below one it holds (made while narrowed) is held from now on, with the ancestor's value to
        give back."""
        key = (knob.name, rel)
        if key in self.journal.held:
            self.journal.claim(key, h.name)
        elif h.moving and (give_back := self._above(knob, rel, h)) is not None:
            self.journal.hold(Holding(knob.name, rel, h.name, give_back, None))

    def _above(self, knob: Knob[Any], rel: str, h: Holder) -> Any:
        """The value to give back `h` journaled for `knob` on the nearest cgroup above `rel` (None: none). A
        v1 cgroup made below a cpuset the holder narrowed starts narrowed: that is the holder's value, not the
        one to give back."""
        parts = rel.split("/")
        for n in range(len(parts) - 1, -1, -1):
            up = self.journal.held.get((knob.name, "/".join(parts[:n])))
            if up is not None and up.holder == h.name:
                return up.give_back
        return None

    def _prune(self) -> None:
        """Drop the holdings of cgroups that are gone (pods that ended: nobody told the writer), so that the
        journal follows the node and not its history; the next prune when it has doubled since."""
        gone = []
        for key, h in self.journal.held.items():
            knob = knob_named(h.knob)
            if knob is None or not os.path.isdir(self.path(knob.ctrl, h.cgroup)):
                gone.append(key)
        self.journal.drop(gone)
        self._prune_at = max(self._prune_at, 2 * len(self.journal.held))

    def settle(self, holder: Holder) -> int:
        """Give back what an earlier run's `holder` held and this run has not claimed again (its first pass is
        over, or it does not run): each knob that still reads as the holder's, parents first; one another
        writer changed since is left and counted. How many were given back."""
        due = sorted(self.journal.due(holder.name), key=lambda h: (h.cgroup.count("/"), h.knob != IDLE.name))
        given, theirs = 0, self._changed_cgroups(due) if holder.together else set()
        for h in due:
            try:
                given += self._give_back(holder, h, h.cgroup in theirs)
            except CgroupGone:  # the cgroup went: nothing to give back
                self.journal.drop([h.key])
            except (CgroupError, ValueError, TypeError) as err:  # refused now: tried again at the next settle
                if h.key not in self._refused:
                    self._refused.add(h.key)
                    log.warning("a holding an earlier run left could not be given back yet",
                                extra={"fields": {"knob": h.knob, "cgroup": h.cgroup, "error": str(err)}})
        if given:
            self.journal.stats.given_back[holder.name] += given
            log.info("what an earlier run held is given back", extra={"fields": {
                "holder": holder.name, "given_back": given, "due": len(due)}})
        return given

    def _changed_cgroups(self, due: list[Holding]) -> set[str]:
        """The cgroups of `due` where another writer changed at least one of the holder's knobs."""
        out = set()
        for h in due:
            knob = knob_named(h.knob)
            try:
                if knob is not None and not self._ours(knob, h, knob.read(self, h.cgroup)):
                    out.add(h.cgroup)
            except (CgroupError, ValueError, TypeError):
                continue
        return out

    @staticmethod
    def _ours(knob: Knob[Any], h: Holding, current: Any) -> bool:
        """Whether the file reads as the holding's (or as the value to give back: nothing was changed)."""
        values = (h.give_back,) if h.ours is None else (h.give_back, *h.ours)
        return h.ours is None or any(knob.equal(current, knob.load(v)) for v in values)

    def release(self, holder: Holder) -> None:
        """A moving holder put every knob back itself (a clean exit): it holds nothing any more."""
        self.journal.drop([k for k, h in self.journal.held.items() if h.holder == holder.name])

    def _give_back(self, holder: Holder, h: Holding, theirs: bool = False) -> int:
        knob = knob_named(h.knob)
        if knob is None:
            raise ValueError(f"no knob {h.knob!r}")
        current, give = knob.read(self, h.cgroup), knob.load(h.give_back)
        subtree = knob is CPUSET and self.hierarchy.is_v1("cpuset")
        if knob.equal(current, give) and not subtree:
            self.journal.drop([h.key])
            return 0
        if theirs or not self._ours(knob, h, current):
            writer = self._writer_of(knob, h.cgroup)
            self.journal.stats.left[(knob.name, writer)] += 1
            log.warning("a knob an earlier run held was changed by another writer since: left as it is",
                        extra={"fields": {"knob": knob.name, "cgroup": h.cgroup, "found": str(current),
                                          "writer": writer}})
            self.journal.drop([h.key])
            return 0
        with self.held_by(holder):
            if subtree:  # a v1 child is inside its parent's set: cgroups made below while narrowed too
                wrote = self.set_cpuset(h.cgroup, give, descendants=True)
            else:
                wrote = self._set(knob, h.cgroup, give)
        self.journal.drop([h.key])
        return int(wrote)

    def _writer_of(self, knob: Knob[Any], rel: str) -> str:
        if self.units is not None and self.units.owns(rel) and not self._systemd_holds(knob):
            return "systemd"  # systemd re-applies its own value of a knob it has no property of ours for
        return "unknown"
