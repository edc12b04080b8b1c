"""Which BE workloads to evict, in what order, and what evictions are still on their way.

Two rankings, because the policies release different things. `order_victims`/`pick_victims` (memory and
CPU eviction, drain) rank by usage. `allocation_order`/`pick_allocations` (the batch ledger) rank by what
a workload holds of the ledger, its requests, and take a candidate only while it releases a request still
needed.

Usage order: BE only (an HP workload is never a candidate, nor a protected one however it is marked),
priority ascending, then usage descending (memory working set when memory is needed, CPU otherwise), then
newest first. Containers of one YARN application keep the places the order gives them as a group, but
fill those places newest first with the ApplicationMaster last; the AM is picked only when no other
container of its application remains.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from qos.model import NodeSnapshot, Resources, Source, Workload

EvictedLog = tuple[tuple[str, float], ...]
"""(workload key, time it was evicted) of victims a policy asked to evict, sorted by key."""


def default_release(w: Workload) -> Resources:
    """What evicting `w` gives back: its CPU request (the BE ledger's unit) and its memory working set."""
    return Resources(max(w.requests.milli_cpu, 0), max(w.usage.memory_working_set_bytes or 0, 0))


def _usage_key(w: Workload, by_memory: bool) -> tuple[float, float]:
    mem = float(w.usage.memory_working_set_bytes or 0)
    cpu = float(w.usage.milli_cpu or 0.0)
    return (mem, cpu) if by_memory else (cpu, mem)


def order_victims(candidates: Iterable[Workload], *, by_memory: bool = True) -> list[Workload]:
    """BE candidates that are not already terminating, most evictable first; protected ones never."""
    pool = [w for w in candidates if w.be and not w.protected and not w.terminating]

    def rank(w: Workload) -> tuple[int, float, float, float, str]:
        first, second = _usage_key(w, by_memory)
        return (w.priority, -first, -second, -w.started_at, w.key)

    ranked = sorted(pool, key=rank)
    apps: dict[str, list[Workload]] = defaultdict(list)
    for w in ranked:
        if w.source is Source.YARN and w.app_id is not None:
            apps[w.app_id].append(w)
    for members in apps.values():
        # Newest first, the AM after every other container of its application.
        members.sort(key=lambda w: (w.is_yarn_am, -w.started_at, w.key))
    taken: Counter[str] = Counter()
    ordered: list[Workload] = []
    for w in ranked:
        if w.source is Source.YARN and w.app_id is not None:
            ordered.append(apps[w.app_id][taken[w.app_id]])
            taken[w.app_id] += 1
        else:
            ordered.append(w)
    return ordered


def pick_victims(
    candidates: Iterable[Workload],
    need_milli_cpu: int,
    need_memory_bytes: int,
    *,
    release: Callable[[Workload], Resources] = default_release,
) -> tuple[list[Workload], Resources]:
    """Walk the victim order and stop as soon as both needs are met.

    A candidate that would release nothing toward a need still unmet is passed over, so nothing is
    evicted for no gain. Returns the victims and the sum of what they release; every victim but the
    last was needed, so a single-resource need is exceeded by less than the last victim's release.
    """
    pool = list(candidates)
    ordered = order_victims(pool, by_memory=need_memory_bytes > 0)
    others: Counter[str] = Counter(
        w.app_id for w in ordered if w.source is Source.YARN and w.app_id is not None and not w.is_yarn_am
    )
    chosen: list[Workload] = []
    got = Resources()
    for w in ordered:
        cpu_left = need_milli_cpu - got.milli_cpu
        mem_left = need_memory_bytes - got.memory_bytes
        if cpu_left <= 0 and mem_left <= 0:
            break
        if w.is_yarn_am and w.app_id is not None and others[w.app_id] > 0:
            continue
        r = release(w)
        if not ((cpu_left > 0 and r.milli_cpu > 0) or (mem_left > 0 and r.memory_bytes > 0)):
            continue
        chosen.append(w)
        got = got + r
        if w.source is Source.YARN and w.app_id is not None and not w.is_yarn_am:
            others[w.app_id] -= 1
    return chosen, got


@dataclass(frozen=True, slots=True)
class Pending:
    """BE workloads whose eviction is under way, and what they will give back."""

    keys: frozenset[str]
    release: Resources


def prune_evicted(snapshot: NodeSnapshot, evicted: EvictedLog, timeout_s: float) -> EvictedLog:
    """Keep the victims that are still present, unless their eviction is older than `timeout_s`.

    A victim that outlives the timeout without terminating is taken as a failed eviction: it is no
    longer counted as pending and may be chosen again.
    """
    present = {w.key: w for w in snapshot.workloads}
    kept = []
    for key, at in evicted:
        w = present.get(key)
        if w is None:
            continue
        if w.terminating or snapshot.taken_at - at <= timeout_s:
            kept.append((key, at))
    return tuple(sorted(kept))


def pending(
    snapshot: NodeSnapshot,
    evicted: EvictedLog,
    also: Collection[str] = (),
    *,
    release: Callable[[Workload], Resources] = default_release,
) -> Pending:
    """BE workloads still terminating, or remembered as evicted (here or by another policy, `also`)."""
    remembered = {key for key, _ in evicted} | set(also)
    going = [w for w in snapshot.be_workloads if w.terminating or w.key in remembered]
    total = Resources()
    for w in going:
        total = total + release(w)
    return Pending(frozenset(w.key for w in going), total)


def remember(evicted: EvictedLog, keys: Iterable[str], at: float) -> EvictedLog:
    known = dict(evicted)
    for key in keys:
        known.setdefault(key, at)
    return tuple(sorted(known.items()))


# ---------------------------------------------------------------- by allocation (batch ledger)


def _yarn_order(w: Workload) -> tuple[int, ...]:
    """Newest YARN container sorts highest: by its id's numbers (cluster ts, app, attempt, epoch, seq)."""
    name = w.key.removeprefix("yarn/")
    parts = name.split("_")[1:]
    epoch = 0
    if parts and parts[0].startswith("e"):
        epoch = int(parts[0][1:]) if parts[0][1:].isdigit() else 0
        parts = parts[1:]
    nums = [int(p) if p.isdigit() else 0 for p in parts]
    if len(nums) == 4:
        return (nums[0], nums[1], nums[2], epoch, nums[3])
    return ()


def allocation_order(workloads: Iterable[Workload]) -> list[Workload]:
    """The batch ledger's ranking (by allocation, not usage): lowest priority first; newest first among
    equals (start time, then YARN id, then key); a YARN ApplicationMaster after every other workload of its
    priority (killing it loses the application)."""
    return sorted(workloads, key=lambda w: (w.priority, w.is_yarn_am, -w.started_at, _neg(_yarn_order(w)),
                                            _neg_str(w.key)))


def _neg(t: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-x for x in t)


def _neg_str(s: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in s)


def pick_allocations(candidates: Iterable[Workload], need: Resources,
                   all_workloads: Iterable[Workload]) -> list[Workload]:
    """Pick victims in `allocation_order` until `need` is covered. A YARN AM is only taken when no other
    container of its application remains (every sibling is already chosen or terminating)."""
    ordered = allocation_order(candidates)
    siblings: dict[str, set[str]] = {}
    for w in all_workloads:
        if w.source is Source.YARN and w.app_id and not w.terminating:
            siblings.setdefault(w.app_id, set()).add(w.key)
    chosen: list[Workload] = []
    taken: set[str] = set()
    cpu, mem = need.milli_cpu, need.memory_bytes
    progress = True
    while (cpu > 0 or mem > 0) and progress:
        progress = False
        for w in ordered:
            if cpu <= 0 and mem <= 0:
                break
            if w.key in taken:
                continue
            if not ((cpu > 0 and w.requests.milli_cpu > 0) or (mem > 0 and w.requests.memory_bytes > 0)):
                continue
            if w.is_yarn_am and w.app_id and (siblings.get(w.app_id, set()) - taken - {w.key}):
                continue
            chosen.append(w)
            taken.add(w.key)
            cpu -= w.requests.milli_cpu
            mem -= w.requests.memory_bytes
            progress = True
    return chosen
