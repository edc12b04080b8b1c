"""A node's allocations in the recovery cache, by key; those applied from a snapshot message are kept in the
message and made records when first read.

Recovery applies every allocation of the cluster before it is Running (a million at 10,000 nodes); making
each a record on arrival cost about 2.7 µs of the client's CPU per allocation, more than the rest of applying
it. Applying reads only what the rules and the totals need (the key, the application, the resources), in
loops that run in C; the other fields are converted once, by whoever reads the allocation (`recover`'s
output, a scheduler). The node's sums are kept here as its allocations change, so counting a node in or out
of the cluster's totals does not walk its allocations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, MutableMapping, Sequence
from operator import attrgetter
from typing import Protocol

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery.decode import Decoder
from agent.state.records import Allocation

DECODER = Decoder()  # shared by every cache in the process: it only keeps equal resources as one object

_KEY = attrgetter("key")
_APPLICATION = attrgetter("application_id")
_RESOURCES = attrgetter("resources")
_MILLI_CPU = attrgetter("milli_cpu")
_MEMORY = attrgetter("memory_bytes")


class _Amount(Protocol):
    @property
    def milli_cpu(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...


class Usage(Protocol):
    """What applying and the totals read of an allocation: a record and its message both have it."""

    @property
    def key(self) -> str: ...
    @property
    def application_id(self) -> str: ...
    @property
    def resources(self) -> _Amount: ...


def keys(allocations: Sequence[Usage]) -> list[str]:
    return list(map(_KEY, allocations))


def application_ids(allocations: Sequence[Usage]) -> set[str]:
    return set(map(_APPLICATION, allocations))


class Allocations(MutableMapping[str, Allocation]):
    """Allocation key -> record. A value still in its snapshot message is converted on first read.

    `milli_cpu`, `memory_bytes` and `applications` (application id -> allocations of it) sum the values.
    """

    __slots__ = ("_items", "_pending", "_source", "applications", "memory_bytes", "milli_cpu")

    def __init__(self) -> None:
        self._items: dict[str, Allocation | int] = {}  # an int: the allocation's index in _source
        self._source: Sequence[Allocation | pb.Allocation] = ()
        self._pending = 0  # values that are still indices: the message is let go at 0
        self.milli_cpu = 0
        self.memory_bytes = 0
        self.applications: dict[str, int] = {}

    def load(self, source: Sequence[Allocation | pb.Allocation], keys: list[str],
             keep: list[int] | None = None, items: Sequence[Usage] | None = None) -> None:
        """Hold `source` (whose keys are `keys`; only the indices in `keep` when given) in place of what was
        held: converted when read. `items`: the same as `source`, read once already (a message's repeated
        field makes an object per element at each pass)."""
        self._source = source
        if keep is None:
            self._items = dict(zip(keys, range(len(keys)), strict=True))
        else:
            self._items = {keys[i]: i for i in keep}
        self._pending = len(self._items)
        if not self._pending:
            self._source = ()
        held: Sequence[Usage] = source if items is None else items
        if len(self._items) != len(held):  # some left out, or a key repeated (the last one is held)
            held = [held[i] for i in self._items.values()]  # type: ignore[index]
        resources = list(map(_RESOURCES, held))
        self.milli_cpu = sum(map(_MILLI_CPU, resources))
        self.memory_bytes = sum(map(_MEMORY, resources))
        self.applications = dict(Counter(map(_APPLICATION, held)))

    def __getitem__(self, key: str) -> Allocation:
        v = self._items[key]
        if isinstance(v, Allocation):
            return v
        a = self._source[v]
        if not isinstance(a, Allocation):
            a = DECODER.allocation(a, key)
        self._items[key] = a
        self._converted()
        return a

    def _converted(self) -> None:
        """One value less held as an index; with none left the message (or tuple) is let go."""
        self._pending -= 1
        if not self._pending:
            self._source = ()

    def usage_of(self, key: str) -> Usage | None:
        """The allocation as held (record or message), without converting it."""
        v = self._items.get(key)
        return self._source[v] if isinstance(v, int) else v

    def __setitem__(self, key: str, a: Allocation) -> None:
        old = self.usage_of(key)
        if old is not None:
            self._add(old, -1)
        was = self._items.get(key)
        self._items[key] = a
        self._add(a, 1)
        if isinstance(was, int):
            self._converted()

    def __delitem__(self, key: str) -> None:
        old = self.usage_of(key)
        was = self._items.pop(key)
        if old is not None:
            self._add(old, -1)
        if isinstance(was, int):
            self._converted()

    def _add(self, a: Usage, sign: int) -> None:
        self.milli_cpu += sign * a.resources.milli_cpu
        self.memory_bytes += sign * a.resources.memory_bytes
        left = self.applications.get(a.application_id, 0) + sign
        if left:
            self.applications[a.application_id] = left
        else:
            del self.applications[a.application_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return f"Allocations({len(self._items)})"

    def clear(self) -> None:
        self.load((), [])
