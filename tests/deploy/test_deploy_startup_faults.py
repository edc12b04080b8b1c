"""Start-up faults: a state directory the agent cannot write (read-only, or a path through a regular file)
stops `coloc-agent run` with one clear error naming the setting (`state.path`), the path and the fix, exit
2, and the agent's cgroup root is never created (the other start steps: tests/reliability/
test_rel_start_faults.py). Runs the installed script against real cgroups; the read-only directory is a
read-only tmpfs in a private mount namespace (unshare), as a read-only volume would be."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kit.realcg import RealRoot

SCRIPT = Path(sys.executable).with_name("coloc-agent")


def config(tmp_path: Path, root: str, state_path: str) -> Path:
    cfg = {
        "node": {"name": "faults", "cpus": 1, "memory": "1Gi", "scope": "cgroup-root"},
        "cgroups": {"mount": "/sys/fs/cgroup", "root": root, "driver": "cgroupfs", "setup_tiers": True,
                    "cleanup_on_exit": True},
        "sources": {"kubelet": {"enabled": False}, "kube_api": {"enabled": False},
                    "reporting": {"mode": "off"}},
        "batch": {"origin": "local"},
        "metrics": {"enabled": False},
        "state": {"path": state_path},
        "api": {"socket_path": str(tmp_path / "agent.sock")},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def check_refused(proc: subprocess.CompletedProcess[str], state_dir: str, real_root: RealRoot) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("coloc-agent:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("coloc-agent: cannot start: state.path "), lines[0]
    assert state_dir in lines[0] and "writable directory" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not Path(real_root.path("cpu", "agent")).exists(), "cgroup root left behind"


@pytest.mark.cgroups
def test_state_path_through_a_file_is_refused_before_any_cgroup(real_root: RealRoot, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    cfg = config(tmp_path, f"{real_root.name}/agent", str(blocker / "state.json"))
    proc = subprocess.run([str(SCRIPT), "run", "--config", str(cfg)], capture_output=True, text=True,
                          timeout=60, check=False)
    check_refused(proc, str(blocker), real_root)


@pytest.mark.cgroups
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not installed")
def test_read_only_state_directory_is_refused_before_any_cgroup(real_root: RealRoot, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    cfg = config(tmp_path, f"{real_root.name}/agent", str(state_dir / "state.json"))
    script = f'mount -t tmpfs -o ro,size=1m none "{state_dir}" && exec "{SCRIPT}" run --config "{cfg}"'
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 2 and "mount:" in proc.stderr:
        pytest.skip(f"cannot make a private mount namespace here: {proc.stderr.strip()}")
    check_refused(proc, str(state_dir), real_root)


@pytest.mark.cgroups
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not installed")
def test_full_state_disk_is_refused_before_any_cgroup(real_root: RealRoot, tmp_path: Path) -> None:
    """A full disk: a 64 KiB tmpfs (private mount namespace) filled to the last byte before start."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    cfg = config(tmp_path, f"{real_root.name}/agent", str(state_dir / "state.json"))
    script = (f'mount -t tmpfs -o size=64k none "{state_dir}" && '
              f'(dd if=/dev/zero of="{state_dir}/fill" bs=4k 2>/dev/null; true) && '
              f'exec "{SCRIPT}" run --config "{cfg}"')
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 2 and "mount:" in proc.stderr:
        pytest.skip(f"cannot make a private mount namespace here: {proc.stderr.strip()}")
    check_refused(proc, str(state_dir), real_root)
