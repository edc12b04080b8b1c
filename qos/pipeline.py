"""Every policy behind one protocol, run in a declared order: `decide(snapshot, state) -> Decision`.

A policy is an object with a `name`, an `initial_state()` and a pure `decide`. The pipeline runs its
policies in order, merges their actions and de-duplicates victims once: a workload an earlier policy
evicts this tick is never evicted again by a later one. Policies that share their victims (`victims`
returns them) see each other's as pending: a victim another policy chose this tick, or one it still
remembers from an earlier tick, is passed to `decide` in `pending`, so its release counts as already on
its way and it is never picked twice. The pipeline also owns what happens when an eviction did not:
`forget` (the kill failed or was refused: no longer a pending release) and `refused` (the evictor said
"try the next victim").

A `Decision` carries the actions, every policy's new state and the pipeline's named outputs: what its
builder (`qos.registry`) declares the rest of the agent reads from the policies (BE's CPU grant, the batch
budget, the drain's verdict), so nobody digs them out of the state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from qos.actions import Action, Evict
from qos.model import NodeSnapshot

S = TypeVar("S")
Out = TypeVar("Out")


class Policy(Generic[S]):
    """One policy. Subclasses set `name` and implement `initial_state` and `decide`; the rest is optional."""

    name: str = ""

    def initial_state(self) -> S:
        raise NotImplementedError

    def decide(self, snapshot: NodeSnapshot, state: S,
               pending: frozenset[str] = frozenset()) -> tuple[list[Action], S]:
        """This tick's actions; `pending`: victims of the other policies, on their way out."""
        raise NotImplementedError

    def victims(self, state: S) -> frozenset[str]:
        """Victims this policy remembers as pending, shared with the others (none unless it says so)."""
        return frozenset()

    def forget(self, state: S, keys: Collection[str]) -> S:
        """These victims' eviction did not happen: they are no pending release any more."""
        return state

    def refused(self, state: S, key: str, at: float) -> S:
        """The evictor refused `key` and asked for the next victim instead."""
        return state


@dataclass(frozen=True, slots=True)
class PipelineState:
    """Each policy's state, by policy name."""

    by_name: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_name)


Readout = Callable[[NodeSnapshot, PipelineState], Out]
"""The named outputs of a tick, read from the snapshot and the policies' new state."""


@dataclass(frozen=True, slots=True)
class Decision(Generic[Out]):
    """One tick's decision: the merged actions, each policy's new state, and the pipeline's named outputs."""

    actions: list[Action]
    state: PipelineState
    outputs: Out

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as `actions, state` where the outputs are not wanted."""
        return iter((self.actions, self.state))


def _no_outputs(_snapshot: NodeSnapshot, _state: PipelineState) -> None:
    return None


class Pipeline(Generic[Out]):
    """The policies of a tick, in the order they run, and what their decision tells the rest (`readout`)."""

    @overload
    def __init__(self: Pipeline[None], policies: Sequence[Policy[Any]]) -> None: ...

    @overload
    def __init__(self, policies: Sequence[Policy[Any]], readout: Readout[Out]) -> None: ...

    def __init__(self, policies: Sequence[Policy[Any]], readout: Readout[Any] = _no_outputs) -> None:
        names = [p.name for p in policies]
        for name in names:
            if not name:
                raise ValueError("every policy needs a name")
            if names.count(name) > 1:
                raise ValueError(f"policy {name!r} is registered twice")
        self.policies: tuple[Policy[Any], ...] = tuple(policies)
        self._readout: Readout[Out] = readout

    def initial_state(self) -> PipelineState:
        return PipelineState({p.name: p.initial_state() for p in self.policies})

    def policy(self, name: str) -> Policy[Any] | None:
        for p in self.policies:
            if p.name == name:
                return p
        return None

    def decide(self, snapshot: NodeSnapshot, state: PipelineState) -> Decision[Out]:
        states = dict(state.by_name)
        actions: list[Action] = []
        evicting: set[str] = set()
        for i, policy in enumerate(self.policies):
            pending = set(evicting)
            for j, other in enumerate(self.policies):
                if j != i:  # the earlier ones' new state, the later ones' state of the last tick
                    pending |= other.victims(states[other.name])
            acts, states[policy.name] = policy.decide(snapshot, states[policy.name], frozenset(pending))
            for a in acts:
                if isinstance(a, Evict):
                    if a.key in evicting:
                        continue
                    evicting.add(a.key)
                actions.append(a)
        new = PipelineState(states)
        return Decision(actions, new, self._readout(snapshot, new))

    def forget(self, state: PipelineState, keys: Collection[str]) -> PipelineState:
        """Victims whose eviction did not happen (refused by the executor's guards, or failed) are no longer
        a pending release: otherwise the node would wait on memory that is not coming back."""
        if not keys:
            return state
        return PipelineState({p.name: p.forget(state[p.name], keys) for p in self.policies})

    def refused(self, state: PipelineState, key: str, at: float) -> PipelineState:
        return PipelineState({p.name: p.refused(state[p.name], key, at) for p in self.policies})
