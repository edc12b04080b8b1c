"""What the eviction policies (CPU, memory) share behind the pipeline protocol: the victims their state
remembers (`evicted`, a `victims.EvictedLog`), offered to the other policies as pending and forgotten when
their eviction did not happen. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

from qos.pipeline import Policy
from qos.victims import EvictedLog


class RemembersVictims(Protocol):
    """A policy state (a dataclass) that remembers its victims and when it asked for their eviction."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def evicted(self) -> EvictedLog: ...


StateT = TypeVar("StateT", bound=RemembersVictims)


def forget_victims(evicted: EvictedLog, keys: Collection[str]) -> EvictedLog:
    """`evicted` without `keys`, in the same order."""
    return tuple((key, at) for key, at in evicted if key not in keys)


class EvictionPolicy(Policy[StateT]):
    """A policy whose state remembers its victims in `evicted`: shared with the other policies as pending,
    and dropped by `forget`; the rest of the state (window, cool-down) stays."""

    def victims(self, state: StateT) -> frozenset[str]:
        return frozenset(key for key, _ in state.evicted)

    def forget(self, state: StateT, keys: Collection[str]) -> StateT:
        return replace(state, evicted=forget_victims(state.evicted, keys))
