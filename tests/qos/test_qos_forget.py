"""Victims whose eviction did not happen stop counting as pending releases."""

from __future__ import annotations

from qos.cpu_eviction import CpuEvictionPolicy, CpuEvictionState, CpuSample
from qos.eviction import EvictionPolicy
from qos.memory_eviction import MemoryEvictionPolicy, MemoryEvictionState
from qos.pipeline import Pipeline, PipelineState
from qos.policies import PolicyConfig
from qos.registry import node_qos_policies
from qos.suppression import SuppressionState


def test_forget_drops_only_the_named_keys_from_both_policies() -> None:
    state = PipelineState({
        "cpu_suppression": SuppressionState(),
        "memory_eviction": MemoryEvictionState(last_round_at=5.0, evicted=(("a", 1.0), ("b", 2.0))),
        "cpu_eviction": CpuEvictionState(evicted=(("b", 2.0), ("c", 3.0))),
    })
    forget_victims = Pipeline(node_qos_policies(PolicyConfig())).forget
    out = forget_victims(state, {"b"})
    assert out["memory_eviction"].evicted == (("a", 1.0),)
    assert out["cpu_eviction"].evicted == (("c", 3.0),)
    assert out["memory_eviction"].last_round_at == 5.0  # the cool-down stays
    assert forget_victims(state, set()) is state


def test_both_eviction_policies_share_their_victims_and_forget_them_one_way() -> None:
    sample = CpuSample(1.0, 500.0, 1000, 2000)
    cpu_state = CpuEvictionState(samples=(sample,), last_round_at=4.0, evicted=(("a", 1.0), ("b", 2.0)))
    mem_state = MemoryEvictionState(last_round_at=5.0, evicted=(("b", 2.0), ("c", 3.0)))
    cpu, mem = CpuEvictionPolicy(), MemoryEvictionPolicy()
    assert isinstance(cpu, EvictionPolicy) and isinstance(mem, EvictionPolicy)
    assert cpu.victims(cpu_state) == {"a", "b"} and mem.victims(mem_state) == {"b", "c"}
    assert cpu.forget(cpu_state, {"a", "c"}) == CpuEvictionState((sample,), 4.0, (("b", 2.0),))
    assert mem.forget(mem_state, {"a", "c"}) == MemoryEvictionState(5.0, (("b", 2.0),))
    assert cpu.victims(cpu.initial_state()) == frozenset()
