"""A bench that lacks a program it runs stops at once, naming the program and its Debian package, before it
makes anything; and a bench never prints a figure it could not measure (NaN, infinity, or a headline figure
left empty): it fails saying which.

Real runs: each bench is started as `python bench/<name>.py --quick` with a PATH that lacks the program.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from kit.bench import finish

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

# bench -> the programs it runs (and the package each comes from)
TOOLS = {
    "network.py": {"ip": "iproute2", "iperf3": "iperf3", "ping": "iputils-ping", "timeout": "coreutils"},
    "interference.py": {"stress-ng": "stress-ng"},
    "collect.py": {"sleep": "coreutils"},
    "footprint.py": {"sleep": "coreutils"},
}


def path_without(tmp_path: Path, tools: set[str], lacking: str) -> str:
    """A PATH of one directory holding links to `tools` except `lacking`."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in tools - {lacking}:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed here: cannot tell its absence from {lacking}'s")
        (d / tool).symlink_to(found)
    return str(d)


def run_bench(bench: str, path: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": path}
    start = time.monotonic()
    run = subprocess.run([sys.executable, str(BENCH / bench), "--quick"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    return run, time.monotonic() - start


class Finished(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def netns_names() -> set[str]:
    if shutil.which("ip") is None:
        return set()
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_the_network_bench_without_ping_stops_at_once_naming_it_and_its_package(tmp_path: Path) -> None:
    before = netns_names()
    run, took = run_bench("network.py", path_without(tmp_path, set(TOOLS["network.py"]), "ping"))
    assert run.returncode == 2, f"rc={run.returncode}\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    assert "`ping`" in run.stderr and "iputils-ping" in run.stderr, run.stderr
    for other in ("`ip`", "`iperf3`", "`timeout`"):
        assert other not in run.stderr, f"{other} is there, yet reported missing: {run.stderr}"
    assert "NaN" not in run.stdout and not run.stdout.strip(), f"nothing is measured: {run.stdout[-500:]}"
    assert took < 60, f"took {took:.0f} s to say so"
    # Other tests on the other worker make and remove namespaces meanwhile (named after their live process,
    # tests/kit/egress.py): the bench's would be named after its own pid, gone now.
    left = {n for n in netns_names() - before if not _alive(n.rpartition("-")[2])}
    assert not left, f"it made namespaces before it found out: {sorted(left)}"


def _alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("bench", sorted(TOOLS))
def test_every_bench_names_each_program_it_lacks(bench: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    run, _ = run_bench(bench, str(empty))
    assert run.returncode == 2, f"rc={run.returncode}\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    for tool, package in TOOLS[bench].items():
        assert f"`{tool}`" in run.stderr and package in run.stderr, f"{tool} ({package}): {run.stderr}"
    assert not run.stdout.strip(), run.stdout[-500:]


def finished(capsys: pytest.CaptureFixture[str], figures: str, *required: str) -> Finished:
    """`finish` of kit.bench on `figures` (JSON, NaN and Infinity allowed): its status and what it printed."""
    code = finish("bench/x.py", json.loads(figures), required)
    out, err = capsys.readouterr()
    return Finished(code, out, err)


def test_a_figure_that_was_not_measured_fails_the_bench_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    nan = finished(capsys, '{"p99_ms": NaN, "ok": 1.5, "per_case": {"a": [1, Infinity]}}')
    assert nan.returncode == 1
    assert not nan.stdout.strip(), f"figures printed although some were not measured: {nan.stdout}"
    assert "p99_ms" in nan.stderr and "per_case.a[1]" in nan.stderr and "ok" not in nan.stderr.split(":")[1]
    assert "NaN" not in nan.stderr and "Infinity" not in nan.stderr

    empty = finished(capsys, '{"ceiling_change_s": null, "share": 0.8}', "ceiling_change_s", "share")
    assert empty.returncode == 1 and "ceiling_change_s" in empty.stderr and not empty.stdout.strip()

    good = finished(capsys, '{"share": 0.8, "changes": 3, "met": true, "note": null}', "share", "changes")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout.strip().splitlines()[-1]) == {"share": 0.8, "changes": 3, "met": True,
                                                                 "note": None}


def test_a_bench_finds_the_kit_installed_not_through_the_checkout() -> None:
    """A bench runs as a script, only bench/ on its path: `kit` must come from the venv (docs/testing.md)."""
    run = subprocess.run([sys.executable, "-c", "import kit; print(kit.__file__)"], cwd="/",
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, (
        "the test kit is not installed for the benches: pip install -e tests/kit (scripts/test does)\n"
        + run.stderr[-500:])
    kit_init = (REPO / "tests" / "kit" / "__init__.py").resolve()
    assert Path(run.stdout.strip()).resolve() == kit_init, run.stdout
