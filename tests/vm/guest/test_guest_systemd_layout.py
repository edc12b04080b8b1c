"""Discovery on a pure v2 node whose kubelet uses the systemd driver: the slices and scopes systemd made as
the kubelet and the runtime ask for them are where the agent's layout looks, with systemd's values."""

from __future__ import annotations

import secrets
import uuid

import pytest
from kit.systemd import CGROUP2, SystemdPods

from cgroups.discovery import detect_driver, discover, resolve_root
from cgroups.layout import Identity, Layout
from cgroups.reader import CgroupReader

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

MIB = 1 << 20


def test_the_kubelet_layout_systemd_makes_is_the_one_the_agent_builds(systemd_pods: SystemdPods) -> None:
    be = systemd_pods.pod("besteffort", CPUWeight=1)
    cid = secrets.token_hex(32)
    proc = systemd_pods.container(be, ["sleep", "60"], cid=cid, MemoryMax=str(64 * MIB))
    bu = systemd_pods.pod("burstable", CPUWeight=40, MemoryMax=256 * MIB)
    gu = systemd_pods.pod("guaranteed", uid=str(uuid.uuid4()), CPUWeight=80)
    h = discover()
    assert h.mode == "v2"
    assert detect_driver(h) == "systemd"
    assert detect_driver(h, root="kubepods.slice") == "systemd"
    assert resolve_root(h, "kubepods") == "kubepods.slice"  # a root named for cgroupfs finds the slice
    layout = Layout("systemd")
    assert layout.kubepods_dir == "kubepods.slice"
    rel = layout.container(be.uid, "besteffort", f"containerd://{cid}")
    assert systemd_pods.cgroup(be.containers[0]) == CGROUP2 / layout.kubepods_dir / rel
    assert layout.pod(be.uid, "besteffort") == be.rel
    assert layout.pod(bu.uid, "burstable") == bu.rel
    assert layout.pod(gu.uid, "guaranteed") == gu.rel
    assert layout.identify(rel) == Identity("container", "besteffort", pod_uid=be.uid, container_id=cid)
    assert layout.identify(bu.rel) == Identity("pod", "burstable", pod_uid=bu.uid)
    assert layout.identify(gu.rel) == Identity("pod", "guaranteed", pod_uid=gu.uid)
    assert layout.identify(layout.tier("besteffort")) == Identity("tier", "besteffort")
    with CgroupReader(h, layout.kubepods_dir) as reader:
        tree = reader.walk("")
        assert {be.rel, rel, bu.rel, gu.rel, layout.tier("burstable")} <= set(tree)
        assert reader.pids(rel) == [proc.pid]
        assert reader.sample(rel).memory_limit_bytes == 64 * MIB  # systemd's MemoryMax, in the file
        assert reader.read_knobs(be.rel).weight == 1
        assert reader.read_knobs(bu.rel).memory_limit_bytes == 256 * MIB
        assert reader.read_knobs(gu.rel).weight == 80
        assert reader.sample(be.rel).cpu_usage_ns >= reader.sample(rel).cpu_usage_ns  # hierarchical


def test_systemd_puts_back_its_value_over_a_hand_written_one(systemd_pods: SystemdPods) -> None:
    """What makes a file-only writer's knob on a unit short-lived: a daemon-reload re-applies the unit's
    own value (the agent sets such knobs through systemd: tests/systemd)."""
    pod = systemd_pods.pod("besteffort", CPUWeight=1, MemoryMax=512 * MIB)
    cg = systemd_pods.cgroup(pod.slice)
    (cg / "memory.max").write_text(str(128 * MIB))
    (cg / "cpu.weight").write_text("7")
    assert (cg / "memory.max").read_text().strip() == str(128 * MIB)
    systemd_pods.reload()
    assert (cg / "memory.max").read_text().strip() == str(512 * MIB)
    assert (cg / "cpu.weight").read_text().strip() == "1"
