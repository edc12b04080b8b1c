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
from collections.abc import Iterator, KeysView, MutableMapping, Sequence
from operator import attrgetter
from typing import NamedTuple, Protocol, cast

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery.decode import Decoder
from agent.state.records import Allocation

DECODER = Decoder()  # shared by every cache in the process: it only keeps equal resources as one object

_ROW = attrgetter("key", "application_id", "resources")
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


class Columns(NamedTuple):
    """What applying reads of a node's allocations, field by field: one pass over the message, each field read
    once (a message's field is an object made at each read)."""

    keys: Sequence[str]
    application_ids: Sequence[str]
    resources: Sequence[_Amount]


def columns(allocations: Sequence[Usage]) -> Columns:
    if not allocations:
        return Columns((), (), ())
    return Columns(*zip(*map(_ROW, allocations), strict=True))


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

    def load(self, source: Sequence[Allocation | pb.Allocation], cols: Columns, index: dict[str, int]
             ) -> None:
        """Hold the elements of `source` at the positions in `index` (key -> position, taken over; `cols` read
        from `source`) in place of what was held: converted when read."""
        self._source = source
        self._items = cast("dict[str, Allocation | int]", index)  # values become records as they are read
        self._pending = len(index)
        if not self._pending:
            self._source = ()
        apps, res = cols.application_ids, cols.resources
        if len(index) != len(apps):  # some left out, or a key repeated (the last one is held)
            apps = [apps[i] for i in index.values()]
            res = [res[i] for i in index.values()]
        self.milli_cpu = sum(map(_MILLI_CPU, res))
        self.memory_bytes = sum(map(_MEMORY, res))
        self.applications = dict(Counter(apps))

    def common(self, keys: KeysView[str]) -> set[str]:
        """Which of `keys` are held here."""
        return self._items.keys() & keys

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
        self.load((), Columns((), (), ()), {})
