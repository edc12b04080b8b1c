"""The BE knobs on a systemd-driver node: held through systemd, they survive what systemd re-applies.

Runs on a real systemd (PID 1) with pure cgroup v2: the test guest (docs/testing.md). The layout is the
kubelet's systemd driver's, made through systemd itself (`systemd-run --scope --slice=...`, as the runtime
asks for a container's scope). systemd puts its own value of a unit's property back into the cgroup on
`daemon-reload`, on a `set-property` of another property and when a child unit starts below it: the first
test shows it does so to a value written only to the file, the next that a value the agent's writer set
through systemd survives all three.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kit.poll import wait
from kit.systemd import CGROUP2, SystemdPods, read, systemctl, systemd_v2_host, write

from cgroups.discovery import Hierarchy
from cgroups.systemd import SystemdUnits, cpu_mask
from cgroups.writer import CgroupWriter

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)


def _writer(k: SystemdPods, units: bool) -> CgroupWriter:
    return CgroupWriter(Hierarchy.v2(CGROUP2), k.root,
                        units=SystemdUnits("/" + k.root) if units else None)


def _be_tier(k: SystemdPods) -> str:
    return k.tier_rel("besteffort").split("/", 1)[1]  # relative to the kubepods root


def test_systemd_puts_its_own_value_back_over_a_file_write(own_pods: SystemdPods) -> None:
    """Why the agent speaks systemd: a hand-written cpu.max / cpuset of a unit's cgroup is undone."""
    own_pods.scope("besteffort", str(uuid.uuid4()))
    tier = own_pods.tier_rel("besteffort")
    systemctl("set-property", "--runtime", tier.rsplit("/", 1)[1], "CPUQuota=80%")
    assert wait(lambda: read(tier, "cpu.max") == "80000 100000", 10)
    assert write(tier, "cpu.max", "20000 100000") is None
    systemctl("daemon-reload")
    assert wait(lambda: read(tier, "cpu.max") == "80000 100000", 10), read(tier, "cpu.max")


def test_be_knobs_set_through_systemd_survive_reload_set_property_and_a_new_child(
        own_pods: SystemdPods) -> None:
    uid = str(uuid.uuid4())
    own_pods.scope("besteffort", uid)
    own_pods.scope("burstable", str(uuid.uuid4()))
    w = _writer(own_pods, units=True)
    assert w.units is not None and w.units.available()
    tier_rel, tier = _be_tier(own_pods), own_pods.tier_rel("besteffort")
    assert w.units.owns(tier_rel)
    cut = {max(int(c) for c in read("", "cpuset.cpus.effective").replace("-", ",").split(","))}
    assert w.set_cpuset(tier_rel, cut, descendants=True)
    assert w.set_cpu_quota(tier_rel, 50_000, 100_000)
    assert w.set_memory_high(tier_rel, 512 << 20)
    want = (",".join(map(str, sorted(cut))), "50000 100000", str(512 << 20))

    def held() -> tuple[str, str, str]:
        return read(tier, "cpuset.cpus"), read(tier, "cpu.max"), read(tier, "memory.high")

    assert held() == want
    props = w.units.unit_properties(tier_rel, ["AllowedCPUs", "CPUQuotaPerSecUSec", "MemoryHigh"])
    assert bytes(props["AllowedCPUs"]).rstrip(b"\0") == cpu_mask(cut)
    assert props["CPUQuotaPerSecUSec"] == 500_000 and props["MemoryHigh"] == 512 << 20
    systemctl("daemon-reload")
    assert held() == want, "daemon-reload undid a knob set through systemd"
    systemctl("set-property", "--runtime", tier.rsplit("/", 1)[1], "CPUWeight=1")
    assert wait(lambda: read(tier, "cpu.weight") == "1", 10)
    assert held() == want, "a set-property of another property undid a knob"
    own_pods.scope("besteffort", str(uuid.uuid4()))  # a new pod slice and scope below the tier
    assert held() == want, "a new child unit undid a knob"
    # v2: the pod slices and the runtime's delegated scopes below the tier were never written.
    below = [p / "cpuset.cpus" for p in (CGROUP2 / tier).rglob("*") if (p / "cpuset.cpus").exists()]
    assert below, "no cgroup below the tier has a cpuset (the kit enables it down to the pod slices)"
    assert all(f.read_text().strip() == "" for f in below), [(str(f), f.read_text()) for f in below]
    # Release: no quota, held by systemd the same way.
    assert w.set_cpu_quota(tier_rel, None, 100_000)
    systemctl("daemon-reload")
    assert read(tier, "cpu.max") == "max 100000"


def test_a_file_only_writer_sees_systemd_undo_its_value_and_counts_it(own_pods: SystemdPods) -> None:
    """Without systemd (units off) a reload undoes the value; setting it again is a re-assert, counted with
    the knob and the cgroup."""
    own_pods.scope("besteffort", str(uuid.uuid4()))
    tier = own_pods.tier_rel("besteffort")
    systemctl("set-property", "--runtime", tier.rsplit("/", 1)[1], "CPUQuota=90%")
    assert wait(lambda: read(tier, "cpu.max") == "90000 100000", 10)
    w = _writer(own_pods, units=False)
    assert w.set_cpu_quota(_be_tier(own_pods), 30_000, 100_000)
    systemctl("daemon-reload")
    assert wait(lambda: read(tier, "cpu.max") == "90000 100000", 10)
    assert w.set_cpu_quota(_be_tier(own_pods), 30_000, 100_000)
    assert read(tier, "cpu.max") == "30000 100000"
    seen = [(o.knob, o.cgroup, o.found) for o in w.overrides]
    assert seen == [("cpu_quota", _be_tier(own_pods), "90000 100000")]


def test_an_idle_cgroup_refuses_the_kubelets_weight_write_on_v2(own_pods: SystemdPods) -> None:
    """The kernel fact behind the coexistence rule, on v2: cpu.weight is refused while cpu.idle is 1."""
    pod = own_pods.scope("besteffort", str(uuid.uuid4())).rsplit("/", 1)[0]
    assert write(pod, "cpu.idle", "1") is None
    assert write(pod, "cpu.weight", "1") is not None
    assert write(pod, "cpu.idle", "0") is None
    assert write(pod, "cpu.weight", "1") is None


def test_a_value_written_while_systemd_did_not_answer_is_handed_to_systemd_once_it_does(
        own_pods: SystemdPods, tmp_path: Path) -> None:
    """Seen in CI: systemd did not answer the agent's first calls (a busy, emulated guest), the BE cpuset
    went to the file alone, and every later tick found the file already right and skipped it, so systemd
    never held it and would put its own value back at the next reload. A value written to the file alone
    where systemd should hold it is handed to systemd at the next set once systemd answers."""
    own_pods.scope("besteffort", str(uuid.uuid4()))
    tier_rel, tier = _be_tier(own_pods), own_pods.tier_rel("besteffort")
    systemctl("set-property", "--runtime", tier.rsplit("/", 1)[1], "CPUQuota=90%")
    assert wait(lambda: read(tier, "cpu.max") == "90000 100000", 10)
    units = SystemdUnits("/" + own_pods.root, socket_path=str(tmp_path / "no-systemd-here"), retry_s=0.0)
    w = CgroupWriter(Hierarchy.v2(CGROUP2), own_pods.root, units=units)
    assert w.set_cpu_quota(tier_rel, 30_000, 100_000)  # systemd unreachable: the file alone
    assert read(tier, "cpu.max") == "30000 100000"
    assert w.stats.systemd_sets == 0
    units.socket_path = ""  # systemd answers now (its private socket, then the system bus)
    assert not w.set_cpu_quota(tier_rel, 30_000, 100_000)  # the file is right: nothing written to it ...
    assert w.stats.systemd_sets == 1  # ... but systemd was given the value it must hold
    assert units.unit_properties(tier_rel, ["CPUQuotaPerSecUSec"])["CPUQuotaPerSecUSec"] == 300_000
    systemctl("daemon-reload")
    assert read(tier, "cpu.max") == "30000 100000", "daemon-reload put systemd's 90% back"
    assert not w.set_cpu_quota(tier_rel, 30_000, 100_000)
    assert w.stats.systemd_sets == 1, "handed over once, not at every set"
