"""A node's allocations in the recovery cache, by key; those applied from a snapshot message are kept in the
message and made records when first read.

Recovery applies every allocation of the cluster before it is Running (a million at 10,000 nodes); making
each a record on arrival cost about 2.7 µs of the client's CPU per allocation, more than the rest of applying
it. Applying reads only what the rules need (the key, the application, and the resources for the totals);
the other fields are converted once, by whoever reads the allocation (`recover`'s output, a scheduler).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, ValuesView
from typing import Protocol

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.recovery.decode import Decoder
from agent.state.records import Allocation

DECODER = Decoder()  # shared by every cache in the process: it only keeps equal resources as one object


class _Amount(Protocol):
    @property
    def milli_cpu(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...


class Usage(Protocol):
    """What the cluster's totals read of an allocation: a record and its message both have it."""

    @property
    def key(self) -> str: ...
    @property
    def application_id(self) -> str: ...
    @property
    def resources(self) -> _Amount: ...


class Allocations(MutableMapping[str, Allocation]):
    """Allocation key -> record; a value still in its snapshot message is converted on first read."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, Allocation | pb.Allocation] = {}

    def __getitem__(self, key: str) -> Allocation:
        v = self._items[key]
        if isinstance(v, Allocation):
            return v
        a = self._items[key] = DECODER.allocation(v, key)
        return a

    def __setitem__(self, key: str, a: Allocation) -> None:
        self._items[key] = a

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return f"Allocations({len(self._items)})"

    def clear(self) -> None:
        self._items = {}

    def hold(self, key: str, a: Allocation | pb.Allocation) -> None:
        """`a` (whose key is `key`) kept as given: a record, or a message made a record when first read."""
        self._items[key] = a

    def usage(self) -> ValuesView[Allocation | pb.Allocation]:
        """Every allocation as it is held (record or message), for the totals: nothing converted."""
        return self._items.values()

    def usage_of(self, key: str) -> Usage | None:
        return self._items.get(key)
