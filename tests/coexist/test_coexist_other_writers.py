"""The node's other cgroup writers keep working beside the agent: while it suppresses BE, and after a SIGKILL.

A real `coloc-agent run` process acts on a private node on this machine's real cgroups (v1 controllers),
laid out as the kubelet's cgroupfs driver lays a node out (`besteffort` tier with `cpu.shares` 2,
`burstable/pod<uid>`, `besteffort/pod<uid>/<container>`, `besteffort/hadoop-yarn/container_*`); the agent
runs with the shipped DaemonSet's cgroup settings (the kubelet owns the tiers: `setup_tiers: false`). The
test then makes, with plain file writes and no code of the agent, the writes the kubelet, the container
runtime and the NodeManager's LinuxContainerExecutor make on such a node (kubernetes pkg/kubelet/cm
qos_container_manager_linux.go and pod_container_manager_linux.go, runc's cgroup managers, Hadoop's
CGroupsCpuResourceHandlerImpl and CGroupsMemoryResourceHandlerImpl), and every one must succeed. The
kubelet's restart after an agent crash is the write that failed before (`cpu.shares: invalid argument` on an
idle tier: Koordinator #2732).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kit.agentproc import agent_config, get, metric, running_agent
from kit.poll import wait
from kit.ports import free_port
from kit.realcg import RealRoot, cpus, try_write

pytestmark = pytest.mark.cgroups

GIB = 1 << 30


class OtherWriters:
    """The kubelet, the container runtime and the NodeManager, by the writes they make (cgroupfs, v1)."""

    def __init__(self, root: RealRoot) -> None:
        self.root = root
        self.failed: list[str] = []

    def _w(self, ctrl: str, rel: str, name: str, value: str) -> None:
        err = try_write(self.root.path(ctrl, rel) / name, value)
        if err is not None:
            self.failed.append(f"{rel or '<root>'}: {err}")

    def _mkdir(self, rel: str) -> None:
        """A new cgroup in each hierarchy; v1 cpuset starts empty, so it gets its parent's (as runc does)."""
        self.root.mkcg(rel)

    def kubelet_qos_tiers(self) -> None:
        """At start-up and every minute (UpdateQOSCgroups): the tiers' shares."""
        self._w("cpu", "besteffort", "cpu.shares", "2")
        self._w("cpu", "burstable", "cpu.shares", "512")

    def kubelet_new_pod(self, tier: str, shares: int, memory: int | None) -> str:
        rel = f"{tier}/pod{uuid.uuid4()}"
        self._mkdir(rel)
        self._w("cpu", rel, "cpu.shares", str(shares))
        self._w("cpu", rel, "cpu.cfs_period_us", "100000")
        self._w("cpu", rel, "cpu.cfs_quota_us", "-1")
        self._w("memory", rel, "memory.limit_in_bytes", str(memory) if memory else "-1")
        return rel

    def kubelet_resize_pod(self, rel: str, shares: int, quota_us: int, memory: int) -> None:
        """In-place resize (KEP-1287): only a pod with requests, i.e. not a BestEffort one, is resized."""
        self._w("cpu", rel, "cpu.shares", str(shares))
        self._w("cpu", rel, "cpu.cfs_quota_us", str(quota_us))
        self._w("memory", rel, "memory.limit_in_bytes", str(memory))

    def runtime_new_container(self, pod: str, shares: int) -> str:
        rel = f"{pod}/{uuid.uuid4().hex}{uuid.uuid4().hex}"
        self._mkdir(rel)
        self._w("cpu", rel, "cpu.shares", str(shares))
        self._w("cpu", rel, "cpu.cfs_quota_us", "-1")
        return rel

    def nodemanager_launch(self, seq: int, vcores: int, memory: int) -> str:
        rel = f"besteffort/hadoop-yarn/container_e01_1700000000000_0001_01_{seq:06d}"
        self._mkdir(rel)
        self._w("cpu", rel, "cpu.shares", str(vcores * 1024))
        self._w("memory", rel, "memory.limit_in_bytes", str(memory))
        self._w("memory", rel, "memory.soft_limit_in_bytes", str(memory))
        return rel

    def all_of_them(self, seq: int) -> None:
        self.kubelet_qos_tiers()
        be_pod = self.kubelet_new_pod("besteffort", 2, None)
        self.runtime_new_container(be_pod, 2)
        hp_pod = self.kubelet_new_pod("burstable", 256, GIB)
        self.runtime_new_container(hp_pod, 256)
        self.kubelet_resize_pod(hp_pod, 512, 50_000, 2 * GIB)
        self.nodemanager_launch(seq, 1, 256 << 20)
        self.kubelet_qos_tiers()


def _status(tmp_path: Path) -> str:
    argv = [sys.executable, "-m", "agent.cli", "status", "--socket", str(tmp_path / "agent.sock")]
    out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def _lay_out_node(root: RealRoot) -> None:
    """What the kubelet has made before the agent starts: the tiers (BestEffort shares 2)."""
    for rel in ("burstable", "besteffort", "besteffort/hadoop-yarn"):
        root.mkcg(rel)
    assert try_write(root.path("cpu", "besteffort") / "cpu.shares", "2") is None


def test_kubelet_runtime_and_nodemanager_writes_succeed_while_suppressed_and_after_a_crash(
        real_root: RealRoot, tmp_path: Path) -> None:
    if "cpu" not in real_root.mounts or "cpuset" not in real_root.mounts:
        pytest.skip("needs the v1 cpu and cpuset controllers")
    _lay_out_node(real_root)
    be_pod = "besteffort/pod" + str(uuid.uuid4())
    real_root.mkcg(be_pod)
    burner = real_root.spawn(be_pod, ["sh", "-c", "while :; do :; done"])
    port = free_port()
    config = agent_config(
        tmp_path, real_root.name, port,
        node={"cpus": 2, "memory": "2Gi"},
        cgroups={"setup_tiers": False, "cleanup_on_exit": False, "driver": "auto"},
        standalone={"workloads": [{"cgroup": be_pod, "priority": 3000, "milli_cpu": 500, "memory": "64Mi"}]},
    )
    tier_cpus = real_root.path("cpuset", "besteffort") / "cpuset.cpus"
    all_cpus = cpus(real_root.path("cpuset") / "cpuset.cpus")
    assert len(all_cpus) >= 2, "needs 2 CPUs for a cpuset cut"
    writers = OtherWriters(real_root)
    with running_agent(config, tmp_path / "agent.log") as agent:
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 3, 30), (tmp_path / "agent.log").read_text()
        assert wait(lambda: cpus(tier_cpus) < all_cpus, 15), "the agent never suppressed BE"
        writers.all_of_them(1)
        assert writers.failed == [], writers.failed
        assert cpus(tier_cpus) < all_cpus, "BE is no longer suppressed while the agent runs"
        assert (real_root.path("cpu", "besteffort") / "cpu.idle").read_text().strip() == "0"
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        # The agent is gone without a chance to undo anything: the kubelet restarts, pods keep coming.
        writers.all_of_them(2)
        assert writers.failed == [], writers.failed
    burner.kill()
    burner.wait()


def test_a_knob_changed_by_another_writer_is_re_asserted_and_counted(real_root: RealRoot,
                                                                    tmp_path: Path) -> None:
    """No systemd owns this tree (the file path): a direct write of the tier's cpuset is seen, undone within
    ticks, and counted by knob and writer with how long it was off."""
    if "cpuset" not in real_root.mounts:
        pytest.skip("needs the v1 cpuset controller")
    _lay_out_node(real_root)
    port = free_port()
    config = agent_config(tmp_path, real_root.name, port, node={"cpus": 2, "memory": "2Gi"},
                          cgroups={"setup_tiers": False, "cleanup_on_exit": False})
    tier_cpus = real_root.path("cpuset", "besteffort") / "cpuset.cpus"
    all_cpus = cpus(real_root.path("cpuset") / "cpuset.cpus")
    with running_agent(config, tmp_path / "agent.log"):
        assert wait(lambda: cpus(tier_cpus) < all_cpus, 30), (tmp_path / "agent.log").read_text()
        held = cpus(tier_cpus)
        ticks = metric(port, "coloc_ticks_total")
        assert wait(lambda: metric(port, "coloc_ticks_total") >= ticks + 2, 10)  # a tick has read it right
        assert try_write(tier_cpus, ",".join(map(str, sorted(all_cpus)))) is None
        assert wait(lambda: cpus(tier_cpus) == held, 10), "the agent did not re-assert the BE cpuset"
        name = 'coloc_knob_overrides_total{knob="cpuset",writer="unknown"}'
        assert wait(lambda: metric(port, name) >= 1, 5)
        off = metric(port, 'coloc_knob_override_off_seconds{knob="cpuset"}')
        assert 0 <= off < 5
        status = _status(tmp_path)
        assert "overridden" in status and "cpuset" in status and "by unknown" in status, status
    log_text = (tmp_path / "agent.log").read_text()
    assert "changed by another writer" in log_text


def test_a_root_named_for_the_other_driver_resolves_and_a_node_without_a_tier_is_not_ready(
        real_root: RealRoot, tmp_path: Path) -> None:
    """`kubepods` configured, only `kubepods.slice` (systemd driver names) there: found and acted on. A root
    with no BE tier: /readyz is red and says why, instead of running on as a silent no-op."""
    if "cpuset" not in real_root.mounts:
        pytest.skip("needs the v1 cpuset controller")
    tier = "kubepods.slice/kubepods-besteffort.slice"
    for rel in ("kubepods.slice", "kubepods.slice/kubepods-burstable.slice", tier):
        real_root.mkcg(rel)
    port = free_port()
    config = agent_config(tmp_path, f"{real_root.name}/kubepods", port, node={"cpus": 2, "memory": "2Gi"},
                          cgroups={"setup_tiers": False, "cleanup_on_exit": False, "systemd_bus": "off"})
    tier_cpus = real_root.path("cpuset", tier) / "cpuset.cpus"
    all_cpus = cpus(real_root.path("cpuset") / "cpuset.cpus")
    with running_agent(config, tmp_path / "agent.log"):
        assert wait(lambda: cpus(tier_cpus) < all_cpus, 30), (tmp_path / "agent.log").read_text()
        assert wait(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 10)
    assert "cgroups.root resolved" in (tmp_path / "agent.log").read_text()

    real_root.mkcg("empty-node")
    bare = tmp_path / "bare"
    bare.mkdir()
    port = free_port()
    config = agent_config(bare, f"{real_root.name}/empty-node", port, node={"cpus": 2, "memory": "2Gi"},
                          cgroups={"setup_tiers": False, "cleanup_on_exit": False})
    with running_agent(config, bare / "agent.log"):
        assert wait(lambda: metric(port, "coloc_ticks_total") >= 2, 30), (bare / "agent.log").read_text()
        code, body = get(f"http://127.0.0.1:{port}/readyz")
        assert code == 503
        assert json.loads(body)["reason"].startswith("no BE tier to act on")
        assert "NOT READY   no BE tier to act on" in _status(bare)
