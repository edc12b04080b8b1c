"""Which cgroups take the BE knobs (qos.membership), from hand-built snapshots: pure, no I/O."""

from __future__ import annotations

import pytest
from kit.snapshot import node_snapshot, workload

from qos.membership import Membership, decide_membership, protected_children, split_quota, tier_level
from qos.model import NodeSnapshot, Resources, Workload

TIER = "besteffort"


def _snap(*ws: Workload, stale: dict[str, str] | None = None) -> NodeSnapshot:
    return node_snapshot(ws, capacity=Resources(4000, 1 << 30), cpus=(0, 1, 2, 3), stale=stale or {})


KUBE_PROXY = workload("k8s/kp", cgroup="besteffort/podkp", protected=True)
POD_A = workload("k8s/a", cgroup="besteffort/poda")
POD_B = workload("k8s/b", cgroup="besteffort/podb")
YARN_1 = workload("yarn/c1", cgroup="besteffort/hadoop-yarn/container_1700000000000_0001_01_000001")
YARN_2 = workload("yarn/c2", cgroup="besteffort/hadoop-yarn/container_1700000000000_0001_01_000002")
LISTED = ["besteffort/hadoop-yarn", "besteffort/poda", "besteffort/podb", "besteffort/podkp"]


def test_no_protected_pod_below_the_tier_keeps_tier_level_knobs() -> None:
    # Protected, but not below the BE tier:
    guard = workload("k8s/guard", cgroup="burstable/podg", protected=True)
    m = decide_membership(_snap(POD_A, POD_B, YARN_1, guard), TIER, LISTED)
    assert m == tier_level(TIER)
    assert not m.split and m.members == (TIER,)


def test_protected_pod_below_the_tier_is_spared_and_every_other_child_is_a_member() -> None:
    other = "besteffort/something-else"  # on disk, in no snapshot: still under the BE knobs
    m = decide_membership(_snap(KUBE_PROXY, POD_A, POD_B, YARN_1, YARN_2), TIER, [*LISTED, other])
    assert m.split
    assert m.spared == ("besteffort/podkp",)
    assert m.members == ("besteffort/hadoop-yarn", "besteffort/poda", "besteffort/podb", other)
    assert m.weights == (2, 1, 1, 1)  # two YARN containers below hadoop-yarn


def test_listed_names_and_paths_are_the_same_children() -> None:
    names = [c.split("/", 1)[1] for c in LISTED]
    snap = _snap(KUBE_PROXY, POD_A)
    assert decide_membership(snap, TIER, names) == decide_membership(snap, TIER, LISTED)


def test_a_protected_container_cgroup_spares_its_whole_pod() -> None:
    kp = workload("k8s/kp", cgroup="besteffort/podkp/0123456789ab", protected=True)
    assert protected_children(_snap(kp, POD_A), TIER) == {"besteffort/podkp"}


def test_systemd_layout() -> None:
    tier = "kubepods-besteffort.slice"
    kp = workload("k8s/kp", cgroup=f"{tier}/kubepods-besteffort-podkp.slice/cri-containerd-abc.scope",
                  protected=True)
    pod = workload("k8s/a", cgroup=f"{tier}/kubepods-besteffort-poda.slice")
    listed = [f"{tier}/kubepods-besteffort-podkp.slice", f"{tier}/kubepods-besteffort-poda.slice"]
    m = decide_membership(_snap(kp, pod), tier, listed)
    assert m.spared == (f"{tier}/kubepods-besteffort-podkp.slice",)
    assert m.members == (f"{tier}/kubepods-besteffort-poda.slice",)


def test_a_be_pod_not_on_disk_yet_is_no_member_until_its_cgroup_appears() -> None:
    snap = _snap(KUBE_PROXY, POD_A, POD_B)
    m = decide_membership(snap, TIER, ["besteffort/podkp", "besteffort/poda"])
    assert m.members == ("besteffort/poda",)
    later = decide_membership(snap, TIER, ["besteffort/podkp", "besteffort/poda", "besteffort/podb"])
    assert later.members == ("besteffort/poda", "besteffort/podb") and later != m


def test_only_protected_pods_below_the_tier_gives_no_members() -> None:
    m = decide_membership(_snap(KUBE_PROXY), TIER, ["besteffort/podkp"])
    assert m.split and m.members == () and m.weights == ()


def test_kept_children_stay_spared_while_data_is_stale() -> None:
    stale = _snap(POD_A, stale={"kubelet": "unreachable"})  # kube-proxy missing from the stale list
    m = decide_membership(stale, TIER, LISTED, keep=["besteffort/podkp"])
    assert m.spared == ("besteffort/podkp",)
    assert "besteffort/podkp" not in m.members
    # a kept child that is no longer on disk is nothing to spare
    assert decide_membership(stale, TIER, ["besteffort/poda"], keep=["besteffort/podkp"]) == tier_level(TIER)


@pytest.mark.parametrize("listed", [["besteffort/poda/c1"], ["burstable/x"], [""], [".."]])
def test_a_listed_cgroup_that_is_no_child_of_the_tier_is_refused(listed: list[str]) -> None:
    with pytest.raises(ValueError, match="not a direct child cgroup of the BE tier"):
        decide_membership(_snap(KUBE_PROXY), TIER, listed)


@pytest.mark.parametrize("tier", ["/besteffort", "a/../b", "besteffort/"])
def test_a_bad_tier_path_is_refused(tier: str) -> None:
    with pytest.raises(ValueError, match="BE tier must be a cgroup path"):
        decide_membership(_snap(KUBE_PROXY), tier, [])


def test_quota_split_follows_the_weights_with_a_floor() -> None:
    m = Membership(TIER, ("besteffort/hadoop-yarn", "besteffort/poda", "besteffort/podb"), (2, 1, 1),
                   ("besteffort/podkp",))
    assert split_quota(40_000, m, 2_000) == {"besteffort/hadoop-yarn": 20_000, "besteffort/poda": 10_000,
                                             "besteffort/podb": 10_000}
    small = split_quota(5_000, m, 2_000)
    assert small == {"besteffort/hadoop-yarn": 2_500, "besteffort/poda": 2_000, "besteffort/podb": 2_000}
    assert sum(split_quota(12_345, m, 0).values()) <= 12_345
    with pytest.raises(ValueError, match="quota total and minimum must be >= 0"):
        split_quota(-1, m, 2_000)
