"""Which cgroups take the BE CPU knobs: the BE tier itself, or its children when a protected pod sits in it.

Kubernetes puts every pod of QoS class BestEffort under the BE tier cgroup, protected ones (kube-proxy, CNI
agents, …) included, and a knob on the tier reaches all of them. So while any protected workload's cgroup lies
below the tier, the knobs go to the tier's *other* children (BE pods, the YARN hierarchy, anything else found
there) and the children holding a protected workload are spared; the tier keeps every CPU and no quota.
With no protected workload below the tier the tier itself is the only member, exactly as before.

Pure: the executor lists the tier's children (the only I/O) and applies what this module decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qos.model import NodeSnapshot


@dataclass(frozen=True, slots=True)
class Membership:
    """`members` take the BE knobs (`weights` in the same order, for a quota split); `spared` are the tier's
    children that hold a protected workload. No `spared` means tier-level knobs: `members == (tier,)`."""

    tier: str
    members: tuple[str, ...]
    weights: tuple[int, ...]
    spared: tuple[str, ...] = ()

    @property
    def split(self) -> bool:
        """True when the knobs go to the tier's children instead of the tier."""
        return bool(self.spared)


def tier_level(tier: str) -> Membership:
    return Membership(_check(tier, "BE tier"), (tier,), (1,))


def _check(rel: str, what: str) -> str:
    if not isinstance(rel, str) or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise ValueError(f"{what} must be a cgroup path relative to the agent's root, got {rel!r}")
    return rel


def _child_of(tier: str, cgroup: str) -> str | None:
    """The tier's direct child that holds `cgroup`, or None when `cgroup` is not strictly below the tier."""
    prefix = tier + "/"
    if not cgroup.startswith(prefix):
        return None
    name = cgroup[len(prefix):].split("/", 1)[0]
    return prefix + name if name else None


def protected_children(snapshot: NodeSnapshot, tier: str) -> frozenset[str]:
    """The tier's children that hold a protected workload of the snapshot."""
    _check(tier, "BE tier")
    found = (_child_of(tier, w.cgroup) for w in snapshot.workloads if w.protected)
    return frozenset(c for c in found if c is not None)


def decide_membership(snapshot: NodeSnapshot, tier: str, listed: Iterable[str] = (),
                      keep: Iterable[str] = ()) -> Membership:
    """Members of the BE knobs this tick.

    `listed` are the tier's child cgroups as found on disk (names or paths relative to the root); `keep`
    are children to spare whatever the snapshot says — the executor passes the ones spared last tick while
    a source is stale, so a protected pod missing from stale data is not suppressed. Members are the listed
    children that are not spared (a BE pod whose cgroup is not there yet joins when it appears); a member's
    weight is the number of BE workloads of the snapshot below it, at least 1.
    """
    _check(tier, "BE tier")
    children: set[str] = set()
    for c in listed:
        name = c[len(tier) + 1:] if c.startswith(tier + "/") else c
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"{c!r} is not a direct child cgroup of the BE tier {tier!r}")
        children.add(f"{tier}/{name}")
    spared = set(protected_children(snapshot, tier))
    for c in keep:
        if _child_of(tier, c) != c:
            raise ValueError(f"{c!r} to keep spared is not a direct child cgroup of the BE tier {tier!r}")
        if c in children:
            spared.add(c)
    if not spared:
        return tier_level(tier)
    counts: dict[str, int] = {}
    for w in snapshot.workloads:
        child = _child_of(tier, w.cgroup)
        if child is not None and w.be and not w.protected:
            counts[child] = counts.get(child, 0) + 1
    members = tuple(sorted(children - spared))
    return Membership(tier, members, tuple(max(1, counts.get(c, 0)) for c in members), tuple(sorted(spared)))


def split_quota(total_us: int, membership: Membership, min_us: int) -> dict[str, int]:
    """The BE CFS quota per member: `total_us` shared in proportion to the weights (rounded down), each
    at least `min_us`. With many members the floors can add up to more than `total_us`."""
    if total_us < 0 or min_us < 0:
        raise ValueError(f"quota total and minimum must be >= 0 µs, got {total_us} and {min_us}")
    whole = sum(membership.weights)
    return {m: max(min_us, total_us * w // whole) for m, w in zip(membership.members, membership.weights,
                                                                  strict=True)}
