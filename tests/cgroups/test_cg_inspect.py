"""`coloc-agent inspect` on real cgroups: real figures for a busy process, classification, errors."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from kit.realcg import RealRoot
from v2files import write_cgroup

from agent.cli.inspect import main
from cgroups.reader import CgroupReader

pytestmark = pytest.mark.cgroups

BUSY = [sys.executable, "-c", "while True: pass"]
POD_UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
YARN = "besteffort/hadoop-yarn/container_e17_1700000000000_0001_01_000002"
BE_POD = f"besteffort/pod{POD_UID}"
HP_POD = "burstable/pod1a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.mark.xdist_group("cpu")
def test_inspect_json_shows_real_figures(real_root: RealRoot, capsys: pytest.CaptureFixture[str]) -> None:
    for rel in (YARN, BE_POD, HP_POD):
        real_root.mkcg(rel)
    real_root.spawn(YARN, BUSY)
    real_root.spawn(HP_POD, [sys.executable, "-c", "import time\nx = b'x' * (40 << 20)\ntime.sleep(60)"])
    reader = CgroupReader(real_root.hierarchy, real_root.name)
    deadline = time.monotonic() + 10
    while (reader.sample(HP_POD).memory_working_set_bytes or 0) < 40 << 20 and time.monotonic() < deadline:
        time.sleep(0.02)  # python's start-up takes a moment on a loaded machine
    assert main(["--cgroup-root", real_root.name, "--interval", "0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == real_root.name and doc["driver"] == "cgroupfs"
    rows = {r["cgroup"]: r for r in doc["cgroups"]}
    assert set(rows) >= {".", "besteffort", "burstable", YARN, BE_POD, HP_POD}
    assert rows[YARN]["workload_class"] == "YARN" and rows[YARN]["tier"] == "besteffort"
    assert rows[BE_POD]["workload_class"] == "BE"
    assert rows[HP_POD]["workload_class"] == "HP" and rows[HP_POD]["tier"] == "burstable"
    assert rows[YARN]["cpu_cores"] >= 0.15  # the busy loop (the 2 cores are shared with other work)
    assert rows[BE_POD]["cpu_cores"] == 0.0  # nothing runs there
    assert rows["besteffort"]["cpu_cores"] >= rows[YARN]["cpu_cores"] * 0.9  # the tier includes it
    assert rows[HP_POD]["working_set_bytes"] >= 40 << 20  # the 40 MiB it holds
    assert rows[YARN]["psi_cpu_some_avg10"] is not None  # from the cgroup2 mount


@pytest.mark.xdist_group("cpu")
def test_inspect_table(real_root: RealRoot, capsys: pytest.CaptureFixture[str]) -> None:
    real_root.mkcg(YARN)
    real_root.spawn(YARN, BUSY)
    assert main(["--cgroup-root", str(real_root.path("cpu")), "--interval", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# ") and real_root.name in out[0]
    assert out[1].split()[:3] == ["TIER", "CLASS", "CGROUP"]
    line = next(row for row in out if "container_e17_1700000000000_0001_01_000002" in row)
    cells = line.split()
    assert cells[:2] == ["besteffort", "YARN"]
    assert float(cells[3]) >= 0.15


def test_inspect_errors_name_the_problem(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cgroup-root", "coloc-test-does-not-exist", "--interval", "0.1"]) == 1
    assert "coloc-test-does-not-exist" in capsys.readouterr().err
    assert main(["--cgroup-root", "../etc", "--interval", "0.1"]) == 1
    assert "'../etc'" in capsys.readouterr().err
    assert main(["--interval", "0"]) == 2
    assert "--interval" in capsys.readouterr().err


def test_inspect_reads_a_v2_tree_with_the_systemd_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--mount` on a v2 tree laid out in a temp dir (exact v2 file formats, see test_cg_v2tree)."""
    esc = POD_UID.replace("-", "_")
    be = "kubepods.slice/kubepods-besteffort.slice"
    for rel in (
        "kubepods.slice",
        be,
        f"{be}/kubepods-besteffort-pod{esc}.slice",
        f"{be}/hadoop-yarn",
        f"{be}/hadoop-yarn/container_1700000000000_0001_01_000001",
        "kubepods.slice/kubepods-pod" + esc + ".slice",
    ):
        write_cgroup(tmp_path / rel, current=64 << 20, inactive=16 << 20)
    assert main(["--mount", str(tmp_path), "--interval", "0.01", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["mode"], doc["root"], doc["driver"]) == ("v2", "kubepods.slice", "systemd")
    classes = {r["cgroup"]: (r["tier"], r["workload_class"]) for r in doc["cgroups"]}
    assert classes[f"kubepods-besteffort.slice/kubepods-besteffort-pod{esc}.slice"] == ("besteffort", "BE")
    assert classes["kubepods-besteffort.slice/hadoop-yarn/container_1700000000000_0001_01_000001"] == (
        "besteffort",
        "YARN",
    )
    assert classes[f"kubepods-pod{esc}.slice"] == ("guaranteed", "HP")
    assert all(r["working_set_bytes"] == 48 << 20 for r in doc["cgroups"])
