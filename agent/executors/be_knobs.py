"""Write the BE CPU knobs on the members `qos.membership` chose: the BE tier, or its non-protected children.

The rule every knob here obeys (docs/coexistence.md): no write of another writer may fail because of a value
we hold, while we run, after a clean exit or after a crash. `cpu.idle = 1` makes the kernel refuse any
`cpu.shares` / `cpu.weight` write on that cgroup (EINVAL), and the kubelet writes the BestEffort tier's shares
at start-up (fatal when refused: Koordinator #2732) and every minute, each pod's at creation and resize, the
runtime each container's, the NodeManager each YARN container's. So `cpu.idle` is written only on a tier this
agent laid out itself (`tier_owned`: `cgroups.setup_tiers`, no kubelet); on a kubelet's tier it is refused
here whatever a policy asks. Idle below the tier would be no help anyway: the kernel weighs SCHED_IDLE
against HP at the level where the two meet (the tier's own entity), not below it.

Split (a protected pod below the tier): the tier keeps every CPU, no quota and `cpu.idle` 0; each member
subtree gets the cpuset, `cpu.idle` and its part of the quota; the spared children get every CPU, no quota
and `cpu.idle` 0 back. Tier level: the tier gets the knobs, its whole subtree the cpuset, and the children
this module made idle or gave a quota are released. The last wanted value of each knob is remembered, so a
change of membership (a protected pod comes or goes, a BE pod appears) moves every knob in the same tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cgroups.errors import CgroupError, CgroupGone
from cgroups.holdings import Holder
from cgroups.writer import CgroupWriter
from qos.actions import ActionKind
from qos.membership import Membership, decide_membership, protected_children, split_quota, tier_level
from qos.model import NodeSnapshot

log = logging.getLogger("coloc.executor")
# Moving: the quota and cpuset follow HP every tick, and nothing but the agent writes them on the BE tier.
BE_CPU = Holder("be_cpu_suppression", moving=True)


class IdleRefused(CgroupError):
    """`cpu.idle` asked for on a tier another writer sets weights on: refused, nothing written."""


class BeKnobs:
    """The BE knobs' members and wanted values; every write goes through the writer (read-compare-write)."""

    def __init__(self, writer: CgroupWriter, tier: str, period_us: int, min_quota_us: int, *,
                 tier_owned: bool) -> None:
        self._w = writer
        self.tier = tier
        self.tier_owned = tier_owned
        self._period_us = period_us
        self._min_quota_us = min_quota_us
        self.applied: Membership | None = tier_level(tier)  # None: re-apply everything next tick
        self._listed: frozenset[str] = frozenset()
        self._last_spared: tuple[str, ...] = ()
        self.cpuset: tuple[int, ...] | None = None
        self.full: tuple[int, ...] = ()
        self.quota_known = False
        self.quota_us: int | None = None
        self.idle: bool | None = None
        self._idled: set[str] = set()  # children made idle by us
        self._capped: set[str] = set()  # children given a quota by us
        self._cut: set[str] = set()  # children given a cpuset by us while split (v2: only they are restored)

    def decide(self, snapshot: NodeSnapshot) -> Membership:
        """This tick's members; the tier's children are listed only while a protected pod is below it."""
        self.full = tuple(sorted(snapshot.cpus))
        previous = self.applied
        keep = self._last_spared if snapshot.stale else ()
        if not keep and not protected_children(snapshot, self.tier):
            self._listed = frozenset()
            return tier_level(self.tier)
        try:
            listed = self._w.children(self.tier)
        except CgroupError as err:
            log.warning("cannot list the BE tier", extra={"fields": {"tier": self.tier, "error": str(err)}})
            return previous if previous is not None else tier_level(self.tier)
        self._listed = frozenset(listed)
        return decide_membership(snapshot, self.tier, listed, keep)

    def _each(self, rels: list[str], op: Callable[[str], bool]) -> bool:
        """`op` on each child; a child that vanished meanwhile is a pod that ended: retried next tick."""
        changed = False
        for rel in rels:
            try:
                changed = op(rel) or changed
            except CgroupGone:
                self.applied = None
                self._w.forget(rel)
        return changed

    def _spared(self, m: Membership) -> list[str]:
        return [c for c in m.spared if c in self._listed]

    # -- knobs -------------------------------------------------------------------------------------

    def set_cpuset(self, cpus: tuple[int, ...], m: Membership) -> bool:
        self.cpuset = cpus
        full = self.full or cpus
        if not m.split:
            changed = self._w.set_cpuset(self.tier, cpus, descendants=True)
            return self._uncut(full) or changed
        # Parent first: a v1 child may only hold CPUs its parent has.
        changed = self._w.set_cpuset(self.tier, full)
        # v1: every spared subtree follows (its CPUs must stay inside the tier's); v2: a child's effective set
        # is bounded by its parent's, so only a child this executor cut gets its CPUs back.
        spared = self._spared(m) if self._v1_cpuset else sorted(self._cut & set(self._spared(m)))
        back = self._each(spared, lambda c: self._w.set_cpuset(c, full, descendants=True))
        self._cut -= set(spared)
        self._cut |= set(m.members)
        cut = self._each(list(m.members), lambda c: self._w.set_cpuset(c, cpus, descendants=True))
        return changed or back or cut

    @property
    def _v1_cpuset(self) -> bool:
        return self._w.hierarchy.is_v1("cpuset")

    def _uncut(self, full: tuple[int, ...]) -> bool:
        """Back at tier level on v2: the children this executor cut while split get every CPU again (v1's
        subtree write already covered them)."""
        if self._v1_cpuset or not self._cut:
            self._cut.clear()
            return False
        cut, self._cut = sorted(self._cut), set()
        return self._each(cut, lambda c: self._w.set_cpuset(c, full))

    def set_idle(self, idle: bool, m: Membership) -> bool:
        if idle and not self.tier_owned:
            raise IdleRefused(
                f"cpu.idle not set on {self.tier!r}: the kubelet writes the BestEffort tier's and its pods' "
                "cpu.shares, and the kernel refuses them on an idle cgroup (a kubelet restart would fail); "
                "cpu.idle is used only on a tier the agent lays out itself (cgroups.setup_tiers)")
        self.idle = idle
        if not m.split:
            changed = self._w.set_cpu_idle(self.tier, idle, keep_weight=True)
            released = sorted(self._idled)
            self._idled.clear()
            return self._each(released, self._not_idle) or changed
        # Members go idle before the tier leaves it, so BE never runs with a normal weight meanwhile.
        changed = self._each(list(m.members), self._make_idle if idle else self._not_idle)
        gone = sorted(self._idled - set(m.members))
        changed = self._each(gone + self._spared(m), self._not_idle) or changed
        return self._w.set_cpu_idle(self.tier, False, keep_weight=True) or changed

    def _make_idle(self, rel: str) -> bool:
        self._idled.add(rel)
        return self._w.set_cpu_idle(rel, True, keep_weight=True)

    def _not_idle(self, rel: str) -> bool:
        self._idled.discard(rel)
        return self._w.set_cpu_idle(rel, False, keep_weight=True)

    def set_quota(self, quota_us: int | None, m: Membership) -> bool:
        self.quota_known, self.quota_us = True, quota_us
        period = self._period_us
        if not m.split:
            # Children first: v1 refuses a parent quota below a child's.
            released = sorted(self._capped)
            self._capped.clear()
            changed = self._each(released, lambda c: self._w.set_cpu_quota(c, None, period))
            return self._w.set_cpu_quota(self.tier, quota_us, period) or changed
        changed = self._w.set_cpu_quota(self.tier, None, period)
        shares = {} if quota_us is None else split_quota(quota_us, m, self._min_quota_us)
        released = sorted((self._capped - set(shares)) | set(self._spared(m)))
        changed = self._each(released, lambda c: self._w.set_cpu_quota(c, None, period)) or changed
        self._capped = (self._capped - set(released)) | set(shares)
        return self._each(sorted(shares), lambda c: self._w.set_cpu_quota(c, shares[c], period)) or changed

    def release(self) -> bool:
        """At shutdown: the tier and its subtree back on every CPU, without quota and not idle (no agent is
        left to lift a suppression); nothing is written when no knob was ever set."""
        tier = tier_level(self.tier)
        changed = self.set_quota(None, tier) if self.quota_known else False
        if self.cpuset is not None and self.full:
            changed = self.set_cpuset(self.full, tier) or changed
        if self.idle is not None:
            changed = self.set_idle(False, tier) or changed
        return changed

    def follow(self, m: Membership) -> list[ActionKind]:
        """Move every knob with a wanted value onto `m` if the members changed; the kinds that changed."""
        if m == self.applied:
            return []
        self.applied = m
        self._last_spared = m.spared
        changed: list[ActionKind] = []
        # Quota first: lifting the tier's quota before the idle/cpuset moves keeps each step valid.
        if self.quota_known and self.set_quota(self.quota_us, m):
            changed.append(ActionKind.SET_BE_CPU_QUOTA)
        if self.cpuset is not None and self.set_cpuset(self.cpuset, m):
            changed.append(ActionKind.SET_BE_CPUSET)
        if self.idle is not None and self.set_idle(self.idle, m):
            changed.append(ActionKind.SET_BE_CPU_IDLE)
        return changed
