"""`coloc-agent status` text from GetStatus messages as the agent builds them (pure rendering, no I/O)."""

from __future__ import annotations

import re

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.cli.status import render


def _status(**kw: object) -> pb.Status:
    st = pb.Status(tick=3, awaits_scheduler_ack=True, **kw)  # type: ignore[arg-type]
    st.identity.node_id = "n1"
    return st


def test_a_draining_node_says_it_waits_for_the_drain() -> None:
    st = _status(waiting_for="the drain to finish", waiting_since_unix_ms=1_700_000_000_000, waiting_s=42.0)
    st.node.lifecycle = pb.LIFECYCLE_DECOMMISSIONING
    text = render(st)
    assert re.search(r"^waiting\s+for the drain to finish for 42\.0s, since the drain started at", text, re.M)
    assert "scheduler   none" not in text


def test_sources_show_age_staleness_and_reason_and_an_unknown_age() -> None:
    st = _status(sources=[
        pb.SourceStatus(name="kubelet", has_age=True, age_s=7.4, stale=True,
                        reason="kubelet: last good data is 7s old (bound 2s): connection refused"),
        pb.SourceStatus(name="yarn", has_age=False, stale=True, reason="yarn: no good answer yet"),
        pb.SourceStatus(name="standalone", has_age=True, age_s=0.04),
    ])
    lines = render(st).splitlines()
    stale = "STALE  kubelet: last good data is 7s old (bound 2s): connection refused"
    assert f"  kubelet      age 7.4s     {stale}" in lines
    assert "  yarn         age -        STALE  yarn: no good answer yet" in lines
    assert "  standalone   age 0.0s     fresh" in lines


def test_no_waiting_line_and_a_scheduler_line_without_a_scheduler() -> None:
    st = pb.Status(tick=1, awaits_scheduler_ack=False)
    st.node.lifecycle = pb.LIFECYCLE_SCHEDULABLE
    text = render(st)
    assert "waiting" not in text and re.search(r"^scheduler\s+none configured", text, re.M)


def test_limits_show_each_pods_cgroups_with_each_values_source() -> None:
    mi = 1 << 20
    st = _status(enforced_limits=[
        pb.WorkloadLimits(pod="batch/spark-1", key="k8s/u1", batch_source="spec", memory_qos_source="NodeSLO",
                          cgroups=[pb.CgroupLimits(level="pod", cgroup="besteffort/podu1", has_batch=True,
                                                   cpu_shares=512, cfs_quota_us=100_000,
                                                   memory_limit_bytes=512 * mi, has_memory_qos=True,
                                                   memory_min_bytes=25 * mi, memory_low_bytes=51 * mi,
                                                   memory_high_bytes=-1)]),
        pb.WorkloadLimits(pod="shop/web", memory_qos_source="yaml", cpu_burst_source="NodeSLO",
                          cgroups=[pb.CgroupLimits(level="container", cgroup="burstable/podu2/c2",
                                                   has_memory_qos=True, memory_min_bytes=128 * mi,
                                                   memory_low_bytes=204 * mi, memory_high_bytes=-1,
                                                   has_cpu_burst=True, cpu_burst_us=50_000)]),
    ])
    lines = render(st).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("limits      (held on each pod's"))
    assert lines[at + 1:at + 7] == [
        "  batch/spark-1  k8s/u1",
        "    pod       besteffort/podu1",
        "      cpu 1.00 cores, shares 512, memory 512.0Mi (spec); memory min 25.0Mi low 51.0Mi (NodeSLO)",
        "  shop/web",
        "    container burstable/podu2/c2",
        "      memory min 128.0Mi low 204.0Mi high max (yaml); burst 50ms (NodeSLO)",
    ]


def test_no_limits_block_when_none_are_held() -> None:
    assert "limits " not in render(_status())
