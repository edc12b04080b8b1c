"""Mount discovery (v1, v2, hybrid), driver detection, and kubelet/YARN path layout for both drivers."""

# ruff: noqa: E501  (mountinfo lines are kept exactly as the kernel prints them)

from __future__ import annotations

from pathlib import Path

import pytest

from cgroups.discovery import Hierarchy, detect_driver, discover, hierarchy_from_mounts, parse_mountinfo
from cgroups.errors import CgroupError, UnknownFormat
from cgroups.layout import Layout

# This machine's layout: each v1 controller alone, plus cgroup2 at .../unified (kernel 6.18).
HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

# A classic v1 host (systemd < 233 style): cpu and cpuacct share one mount, optional fields present.
V1_COMBINED = """\
25 18 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
26 25 0:22 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,xattr,name=systemd
29 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,memory
"""

V2 = """\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""

UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CID = "4f1c2e3d" * 8


def test_hybrid_mounts() -> None:
    h = hierarchy_from_mounts(parse_mountinfo(HYBRID))
    assert h.mode == "hybrid"
    assert h.unified == Path("/sys/fs/cgroup/unified")
    assert h.controller_dir("memory") == Path("/sys/fs/cgroup/memory")
    assert h.controller_dir("cpu") == Path("/sys/fs/cgroup/cpu")
    assert "name=systemd" not in h.v1
    assert h.controller_dir("hugetlb") == Path("/sys/fs/cgroup/unified")  # not on v1: the unified mount


def test_combined_v1_mount_serves_both_controllers() -> None:
    h = hierarchy_from_mounts(parse_mountinfo(V1_COMBINED))
    assert h.mode == "v1"
    assert h.v1["cpu"] == h.v1["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert h.mounts() == (Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/memory"))
    with pytest.raises(CgroupError, match="pids"):
        h.controller_dir("pids")


def test_pure_v2() -> None:
    h = hierarchy_from_mounts(parse_mountinfo(V2))
    assert h.mode == "v2"
    assert h.v1 == {}
    assert h.controller_dir("memory") == Path("/sys/fs/cgroup")


def test_base_restricts_to_mounts_below_it() -> None:
    text = V2 + "90 30 0:26 / /host/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    h = hierarchy_from_mounts(parse_mountinfo(text), base=Path("/host/sys/fs/cgroup"))
    assert h.unified == Path("/host/sys/fs/cgroup")
    with pytest.raises(CgroupError, match="no cgroup mounts found under /nowhere"):
        hierarchy_from_mounts(parse_mountinfo(text), base=Path("/nowhere"))


def test_escaped_mount_point_and_bad_line() -> None:
    mounts = parse_mountinfo("50 1 0:40 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n")
    assert mounts[0].mount_point == Path("/mnt/my cgroups")
    with pytest.raises(UnknownFormat) as err:
        parse_mountinfo(HYBRID + "garbage without separator\n", "mountinfo")
    assert err.value.line_no == len(HYBRID.splitlines()) + 1
    assert "mountinfo" in str(err.value)


def test_discover_this_machine(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(HYBRID)
    assert discover(info).mode == "hybrid"
    real = discover()  # /proc/self/mountinfo of the test process
    assert real.mode in ("v1", "v2", "hybrid")


def _tree(tmp_path: Path, *dirs: str) -> Hierarchy:
    for d in dirs:
        (tmp_path / d).mkdir(parents=True)
    return Hierarchy.v2(tmp_path)


def test_detect_driver_from_disk(tmp_path: Path) -> None:
    assert detect_driver(_tree(tmp_path / "a", "kubepods.slice/kubepods-besteffort.slice")) == "systemd"
    assert detect_driver(_tree(tmp_path / "b", "kubepods/besteffort")) == "cgroupfs"
    # an agent root that is the kubepods directory itself
    h = _tree(tmp_path / "c", "my-root/my-root-besteffort.slice")
    assert detect_driver(h, "my-root", root="my-root") == "systemd"
    h = _tree(tmp_path / "d", "test-root/besteffort")
    assert detect_driver(h, root="test-root") == "cgroupfs"
    with pytest.raises(CgroupError, match="set the driver"):
        detect_driver(_tree(tmp_path / "e", "system.slice"))


def test_detect_driver_override_wins(tmp_path: Path) -> None:
    h = _tree(tmp_path, "kubepods/besteffort")
    assert detect_driver(h, override="systemd") == "systemd"
    with pytest.raises(ValueError, match="cgroup driver"):
        detect_driver(h, override="openrc")


def test_cgroupfs_layout() -> None:
    lay = Layout("cgroupfs")
    assert lay.kubepods_dir == "kubepods"
    assert lay.tier("guaranteed") == ""
    assert lay.tier("besteffort") == "besteffort"
    assert lay.tier("Burstable") == "burstable"
    assert lay.pod(UID, "guaranteed") == f"pod{UID}"
    assert lay.pod(UID, "besteffort") == f"besteffort/pod{UID}"
    assert lay.container(UID, "burstable", f"containerd://{CID}") == f"burstable/pod{UID}/{CID}"
    assert lay.container(UID, "burstable", f"docker://{CID}") == f"burstable/pod{UID}/{CID}"
    assert lay.container(UID, "burstable", f"cri-o://{CID}") == f"burstable/pod{UID}/crio-{CID}"
    assert lay.yarn_root() == "besteffort/hadoop-yarn"
    cid = "container_e17_1700000000000_0042_01_000003"
    assert lay.yarn_container(cid) == f"besteffort/hadoop-yarn/{cid}"
    assert lay.yarn_container("container_1700000000000_0042_01_000001").endswith("_000001")


def test_systemd_layout_escapes_pod_uid() -> None:
    lay = Layout("systemd")
    esc = UID.replace("-", "_")
    assert lay.kubepods_dir == "kubepods.slice"
    assert lay.tier("besteffort") == "kubepods-besteffort.slice"
    assert lay.pod(UID, "guaranteed") == f"kubepods-pod{esc}.slice"
    assert lay.pod(UID, "besteffort") == f"kubepods-besteffort.slice/kubepods-besteffort-pod{esc}.slice"
    assert lay.container(UID, "besteffort", f"containerd://{CID}") == (
        f"kubepods-besteffort.slice/kubepods-besteffort-pod{esc}.slice/cri-containerd-{CID}.scope"
    )
    assert lay.container(UID, "burstable", f"cri-o://{CID}").endswith(f"/crio-{CID}.scope")
    assert (
        lay.container(UID, "guaranteed", f"docker://{CID}") == f"kubepods-pod{esc}.slice/docker-{CID}.scope"
    )
    assert lay.yarn_root() == "kubepods-besteffort.slice/hadoop-yarn"
    assert Layout("systemd", yarn_hierarchy="yarn/nm").yarn_root() == "kubepods-besteffort.slice/yarn/nm"


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_identify_inverts_the_builders(driver: str) -> None:
    lay = Layout(driver)
    pod = lay.identify(lay.pod(UID, "besteffort"))
    assert (pod.kind, pod.tier, pod.pod_uid) == ("pod", "besteffort", UID)
    ctr = lay.identify(lay.container(UID, "burstable", f"containerd://{CID}"))
    assert (ctr.kind, ctr.tier, ctr.container_id) == ("container", "burstable", CID)
    g = lay.identify(lay.pod(UID, "guaranteed"))
    assert (g.kind, g.tier) == ("pod", "guaranteed")
    cid = "container_e17_1700000000000_0042_01_000003"
    y = lay.identify(lay.yarn_container(cid))
    assert (y.kind, y.yarn_container) == ("yarn", cid)
    assert lay.identify(lay.tier("besteffort")).kind == "tier"
    assert lay.identify("").kind == "root"
    assert lay.identify("system.slice").kind == "other"


HOSTILE = ["../../etc", "..", "a/b", "", "pod/../../x", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d/..", "%2e%2e"]


@pytest.mark.parametrize("bad", [*HOSTILE, "0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D", UID + "0"])
def test_hostile_pod_uid_is_refused(bad: str) -> None:
    for driver in ("cgroupfs", "systemd"):
        with pytest.raises(ValueError, match="pod uid") as err:
            Layout(driver).pod(bad, "besteffort")
        assert repr(bad) in str(err.value)


@pytest.mark.parametrize(
    "bad",
    [
        f"containerd://../../{CID}",
        f"containerd://{CID}/..",
        CID,
        "containerd://xyz",
        f"rkt://{CID}",
        f"containerd://{CID}0",
        "containerd://" + "a" * 11,
        "docker://",
    ],
)
def test_hostile_container_id_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="container") as err:
        Layout("systemd").container(UID, "besteffort", bad)
    assert "container" in str(err.value)


@pytest.mark.parametrize(
    "bad",
    [
        *HOSTILE,
        "container_1_2_3_4",
        "container_e1_1700000000000_0001_01_00001",
        "container_x_1_0001_01_000001",
        "container_1700000000000_0001_01_000001/../..",
        "application_1700000000000_0001",
    ],
)
def test_hostile_yarn_container_id_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="YARN container id") as err:
        Layout("cgroupfs").yarn_container(bad)
    assert repr(bad) in str(err.value)


def test_bad_layout_configuration() -> None:
    with pytest.raises(ValueError, match="driver"):
        Layout("upstart")
    with pytest.raises(ValueError, match="kubepods"):
        Layout("cgroupfs", kubepods="../kubepods")
    with pytest.raises(ValueError, match="YARN cgroup hierarchy"):
        Layout("cgroupfs", yarn_hierarchy="../../etc")
    with pytest.raises(ValueError, match="QoS tier"):
        Layout("cgroupfs").tier("platinum")
