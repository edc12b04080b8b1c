"""A start that fails is one line and leaves nothing: each start-up step that can fail, with a real
`coloc-agent run` process on a real cgroup root. Each prints one line (`coloc-agent: cannot start:
<setting> <value>: <why>`) on stderr, exits 2 without a traceback, and leaves no cgroup it made: the root
when it made it, the tiers (`burstable`, `besteffort`, `besteffort/hadoop-yarn`) in every hierarchy when
the root was there before (and that root stays). The state directory's faults are
tests/deploy/test_deploy_startup_faults.py; a failure inside `build` is test_rel_root_cleanup.py."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit.agentproc import agent_argv, agent_config
from kit.holdings import marks
from kit.ports import free_port
from kit.realcg import RealRoot

pytestmark = [pytest.mark.cgroups]

TIERS = ("burstable", "besteffort", "besteffort/hadoop-yarn")
needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mount") is None,
                                   reason="unshare or mount is not installed")


def start(cfg: Path, *, shell_before: str = "") -> subprocess.CompletedProcess[str]:
    """`coloc-agent run --config CFG` to its end; with `shell_before`, those shell commands first, in a
    private mount namespace (what they mount is gone with it)."""
    argv = agent_argv("run", "--config", str(cfg))
    if shell_before:
        script = f"{shell_before} && exec " + " ".join(f"'{a}'" for a in argv)
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line; exit 2, no traceback, every one of `words` in it."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("coloc-agent:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = lines[0]
    assert line.startswith("coloc-agent: cannot start: "), line
    assert all(w in line for w in words), line
    return line


def left(real_root: RealRoot, rel: str) -> list[Path]:
    return [d for d in real_root.dirs(rel) if d.exists()]


def nothing_left(real_root: RealRoot, tmp_path: Path, *, foreign: bool) -> None:
    """No tier in any hierarchy; the root kept when it was there before, else gone with its mark."""
    for tier in TIERS:
        assert not left(real_root, f"agent/{tier}"), f"a failed start left {tier}"
    if foreign:
        assert len(left(real_root, "agent")) == len(real_root.dirs("agent")), "a root it did not make went"
    else:
        assert not left(real_root, "agent"), "a failed start left the root it made"
    held = tmp_path / "state" / "state.json.held"
    assert not held.exists() or "root" not in marks(held)
    # the state files this start made are gone with it (the kit makes the directory; it stays)
    assert not [p.name for p in (tmp_path / "state").iterdir()], "a failed start left state files"


def config(real_root: RealRoot, tmp_path: Path, port: int | None = None, **extra: Any) -> Path:
    return agent_config(tmp_path, f"{real_root.name}/agent", free_port() if port is None else port, **extra)


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port another process listens on (here, a socket of the test's)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@contextlib.contextmanager
def unix_listener(path: Path) -> Iterator[Path]:
    """Another process serving on `path` (a listening unix socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(1)
        yield path
    finally:
        sock.close()
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("foreign", [False, True], ids=["its-own-root", "a-root-there-before"])
def test_metrics_port_taken(real_root: RealRoot, tmp_path: Path, foreign: bool) -> None:
    if foreign:
        real_root.mkcg("agent")
    with taken_port() as port:
        proc = start(config(real_root, tmp_path, port))
    refused(proc, f"metrics.port {port}: address already in use")
    nothing_left(real_root, tmp_path, foreign=foreign)
    assert not (tmp_path / "agent.sock").exists()


def test_metrics_bind_address_not_on_this_host(real_root: RealRoot, tmp_path: Path) -> None:
    cfg = config(real_root, tmp_path, metrics={"bind": "192.0.2.1"})  # TEST-NET-1: on no host
    refused(start(cfg), "metrics.bind 192.0.2.1: cannot assign requested address")
    nothing_left(real_root, tmp_path, foreign=False)


@pytest.mark.parametrize("foreign", [False, True], ids=["its-own-root", "a-root-there-before"])
def test_api_socket_in_use(real_root: RealRoot, tmp_path: Path, foreign: bool) -> None:
    if foreign:
        real_root.mkcg("agent")
    sock = tmp_path / "agent.sock"
    with unix_listener(sock):
        line = refused(start(config(real_root, tmp_path)), "api.socket_path", str(sock))
        assert "another process is serving" in line, line
        assert sock.exists(), "the other process's socket was removed"
    nothing_left(real_root, tmp_path, foreign=foreign)


def test_admin_socket_in_use_leaves_no_read_socket(real_root: RealRoot, tmp_path: Path) -> None:
    """The read socket is bound first: the admin socket's failure takes it away again."""
    admin = tmp_path / "admin.sock"
    cfg = config(real_root, tmp_path, api={"admin_socket_path": str(admin)})
    with unix_listener(admin):
        refused(start(cfg), "api.admin_socket_path", "another process is serving")
    assert not (tmp_path / "agent.sock").exists(), "the read socket was left"
    nothing_left(real_root, tmp_path, foreign=False)


@needs_unshare
def test_api_socket_directory_not_writable(real_root: RealRoot, tmp_path: Path) -> None:
    """The socket's directory on a read-only mount (a read-only tmpfs in a private mount namespace)."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = config(real_root, tmp_path, api={"socket_path": str(run / "agent.sock")})
    proc = start(cfg, shell_before=f'mount -t tmpfs -o ro,size=64k none "{run}"')
    if proc.returncode != 2 and "mount:" in proc.stderr:
        pytest.skip(f"cannot make a private mount namespace here: {proc.stderr.strip()}")
    refused(proc, f"api.socket_path {run / 'agent.sock'}", "read-only file system")
    nothing_left(real_root, tmp_path, foreign=False)


def test_cgroup_mount_missing(real_root: RealRoot, tmp_path: Path) -> None:
    nowhere = tmp_path / "no-cgroups"
    nowhere.mkdir()
    cfg = config(real_root, tmp_path, cgroups={"mount": str(nowhere)})
    refused(start(cfg), f"cgroups.mount {nowhere}: no cgroup mounts found")
    nothing_left(real_root, tmp_path, foreign=False)


@needs_unshare
def test_cgroup_mount_read_only(real_root: RealRoot, tmp_path: Path) -> None:
    """The hierarchy the writer makes a cgroup in last is read-only (remounted so, in a private mount
    namespace): the root is made in the others first, and must go again."""
    last = real_root.hierarchy.unified or next(reversed(real_root.mounts.values()))
    proc = start(config(real_root, tmp_path), shell_before=f'mount -o remount,bind,ro "{last}"')
    if proc.returncode != 2 and "mount:" in proc.stderr:
        pytest.skip(f"cannot remount in a private mount namespace here: {proc.stderr.strip()}")
    refused(proc, f"cgroups.root {real_root.name}/agent", "read-only")
    nothing_left(real_root, tmp_path, foreign=False)


def test_systemd_bus_named_but_unreachable(real_root: RealRoot, tmp_path: Path) -> None:
    """A socket named in `cgroups.systemd_bus` is required (`auto` waits for systemd instead)."""
    real_root.mkcg("agent.slice/agent-besteffort.slice")
    bus = tmp_path / "no-bus"
    cfg = agent_config(tmp_path, f"{real_root.name}/agent.slice", free_port(),
                       cgroups={"driver": "systemd", "setup_tiers": False, "cleanup_on_exit": False,
                                "systemd_bus": str(bus)})
    refused(start(cfg), f"cgroups.systemd_bus {bus}", "cannot reach systemd")
    assert [p.name for p in left(real_root, "agent.slice")] == ["agent.slice"] * len(real_root.dirs())
    assert [p.name for p in real_root.dirs("agent.slice")[0].iterdir() if p.is_dir()] == [
        "agent-besteffort.slice"], "the agent made a cgroup under a root it does not lay out"
