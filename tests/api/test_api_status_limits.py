"""GetStatus carries each pod's limits the executors hold (batch limits, memory QoS, CPU burst) with each
part's source, read through the hook at every call (issue 26's "visible"), over the real unix socket."""

from __future__ import annotations

from pathlib import Path

from agent.api.client import AgentClient
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.server import start_api_server
from agent.config.api import ApiConfig
from agent.executors.batch_limits import Enforced
from agent.executors.resource_qos import HeldLimits
from agent.state import Ledger, LedgerConfig
from qos.batch_limits import Limits
from qos.memory_qos import MemoryValues

MI = 1 << 20
BE_POD, BE_CTR = "besteffort/poduid-be", "besteffort/poduid-be/c1"
LS_POD, LS_CTR = "burstable/poduid-ls", "burstable/poduid-ls/c2"
BATCH = {"k8s/uid-be": Enforced("k8s/uid-be", "batch/spark-1", "spec", Limits(BE_POD, 512, 100_000, 512 * MI),
                                (Limits(BE_CTR, 512, None, None),))}
MEMORY = {"batch/spark-1": (MemoryValues(BE_POD, 25 * MI, 51 * MI),
                            MemoryValues(BE_CTR, 25 * MI, 51 * MI, 486 * MI, sets_high=True)),
          "shop/web": (MemoryValues(LS_POD, 160 * MI, 256 * MI),
                       MemoryValues(LS_CTR, 128 * MI, 204 * MI, None, sets_high=True))}
BURST = {"shop/web": (("pod", LS_POD, 75_000), ("container", LS_CTR, 50_000))}


def _cgroup(level: str, rel: str, **kw: object) -> pb.CgroupLimits:
    return pb.CgroupLimits(level=level, cgroup=rel, memory_high_bytes=kw.pop("memory_high_bytes", -1),
                           **kw)  # type: ignore[arg-type]


async def test_get_status_carries_each_pods_limits_and_sources_read_at_each_call(tmp_path: Path) -> None:
    held = [HeldLimits(BATCH, MEMORY, BURST, "NodeSLO", "yaml")]
    ledger = Ledger.open(LedgerConfig(node_id="node-t", state_path=str(tmp_path / "state.json")))
    ledger.start_persistence()
    server = await start_api_server(ledger, ApiConfig(socket_path=str(tmp_path / "agent.sock")),
                                    limits=lambda: held[0])
    try:
        async with AgentClient(str(tmp_path / "agent.sock")) as c:
            st = await c.status()
            be_pod = _cgroup("pod", BE_POD, has_batch=True, cpu_shares=512, cfs_quota_us=100_000,
                             memory_limit_bytes=512 * MI, has_memory_qos=True, memory_min_bytes=25 * MI,
                             memory_low_bytes=51 * MI)
            be_ctr = _cgroup("container", BE_CTR, has_batch=True, cpu_shares=512, cfs_quota_us=-1,
                             memory_limit_bytes=-1, has_memory_qos=True, memory_min_bytes=25 * MI,
                             memory_low_bytes=51 * MI, memory_high_bytes=486 * MI)
            ls_pod = _cgroup("pod", LS_POD, has_memory_qos=True, memory_min_bytes=160 * MI,
                             memory_low_bytes=256 * MI, has_cpu_burst=True, cpu_burst_us=75_000)
            ls_ctr = _cgroup("container", LS_CTR, has_memory_qos=True, memory_min_bytes=128 * MI,
                             memory_low_bytes=204 * MI, has_cpu_burst=True, cpu_burst_us=50_000)
            assert list(st.enforced_limits) == [
                pb.WorkloadLimits(pod="batch/spark-1", key="k8s/uid-be", batch_source="spec",
                                  memory_qos_source="NodeSLO", cgroups=[be_pod, be_ctr]),
                pb.WorkloadLimits(pod="shop/web", memory_qos_source="NodeSLO", cpu_burst_source="yaml",
                                  cgroups=[ls_pod, ls_ctr]),
            ]
            held[0] = HeldLimits({}, {}, {})  # everything given back: the next call says so
            assert list((await c.status()).enforced_limits) == []
    finally:
        await server.stop(0)
        await ledger.close()


async def test_without_the_hook_get_status_has_no_limits(tmp_path: Path) -> None:
    ledger = Ledger.open(LedgerConfig(node_id="node-t", state_path=str(tmp_path / "state.json")))
    ledger.start_persistence()
    server = await start_api_server(ledger, ApiConfig(socket_path=str(tmp_path / "agent.sock")))
    try:
        async with AgentClient(str(tmp_path / "agent.sock")) as c:
            assert list((await c.status()).enforced_limits) == []
    finally:
        await server.stop(0)
        await ledger.close()
