"""BE pods already on the node when the agent starts get their batch limits right after its first pod list,
not at the first periodic pass (`batch_limits.resync_s`, 30 s here): a real `coloc-agent run`, the kubelet a
local HTTP server with its PodList, real v1 cgroups made before the agent starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from batchkit import CONTAINER, MI, POD, be_pod, read, write_list
from kit.agentproc import kubelet_node_config, running_agent
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups]

RESYNC_S = 30.0


def test_pods_there_at_start_get_their_limits_after_the_first_pod_list(real_root: RealRoot,
                                                                       tmp_path: Path) -> None:
    if real_root.hierarchy.mode == "v2":
        pytest.skip("v1 files")
    for rel in ("besteffort", "burstable", POD, CONTAINER):
        real_root.mkcg(rel)
    cpu, mem, ccpu = (real_root.path("cpu", POD), real_root.path("memory", POD),
                      real_root.path("cpu", CONTAINER))

    def placed() -> bool:
        return (read(cpu / "cpu.cfs_quota_us") == "100000" and read(ccpu / "cpu.cfs_quota_us") == "100000"
                and read(mem / "memory.limit_in_bytes") == str(512 * MI))

    assert not placed()
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod())) as fake:
        config = kubelet_node_config(tmp_path, real_root.name, fake.url, resync_s=RESYNC_S,
                                     batch_limits={"resync_s": RESYNC_S})
        log = tmp_path / "agent.log"
        t0 = time.monotonic()
        with running_agent(config, log):
            assert wait(placed, RESYNC_S / 3, every=0.005), log.read_text()[-3000:]
            took = time.monotonic() - t0
            listed = len(fake.seen("GET", "/pods"))
    print(f"\nstart to batch limits in place: {took * 1000:.0f} ms (process start included; "
          f"{listed} pod list(s) fetched)")
    assert took < RESYNC_S / 3
