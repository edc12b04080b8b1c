"""A kubelet-style systemd layout on a real systemd + pure cgroup v2 host (the test guest), and its cleanup.

The kubelet's systemd driver makes each pod a slice (`<kubepods>-<tier>-pod<uid with _>.slice`, whose parents
`<kubepods>.slice` and `<kubepods>-<tier>.slice` systemd creates from the name) and the runtime each container
a scope in it (`cri-containerd-<id>.scope`). Here the scopes are made with `systemd-run --scope`, as the
runtime asks systemd for them over D-Bus. Every unit made is stopped at the end; the slices go with their last
child (systemd removes a transient slice once it is empty and stopped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from kit.poll import wait

CGROUP2 = Path("/sys/fs/cgroup")


def systemd_v2_host() -> str | None:
    """Why this is not a systemd + pure cgroup v2 host (None when it is)."""
    if not (CGROUP2 / "cgroup.subtree_control").exists() or (CGROUP2 / "cpu").is_dir():
        return "not a pure cgroup v2 host"
    try:
        comm = Path("/proc/1/comm").read_text().strip()
    except OSError:
        comm = ""
    if comm != "systemd" or shutil.which("systemd-run") is None:
        return "systemd is not PID 1"
    if os.geteuid() != 0:
        return "needs root"
    return None


def read(rel: str, name: str) -> str:
    return (CGROUP2 / rel / name).read_text().strip()


def write(rel: str, name: str, value: str) -> str | None:
    """A plain write(2), as another writer makes it; the error text when the kernel refuses it."""
    try:
        fd = os.open(CGROUP2 / rel / name, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as err:
        return f"{rel}/{name}={value}: {err.strerror}"
    return None


def systemctl(*args: str) -> None:
    subprocess.run(["systemctl", *args], check=True, capture_output=True, timeout=60)


def enable_controllers(rel: str) -> None:
    """What runc's systemd cgroup manager does after systemd made the unit (fs2.CreateCgroupPath): every
    controller the root offers enabled in `subtree_control` from the root down to `rel`'s parent, so the pod
    slices and tiers have cpu, cpuset, io, memory and pids files as on a kubelet's node."""
    wanted = set(read("", "cgroup.subtree_control").split())
    parts = rel.split("/")
    for n in range(len(parts)):
        parent = "/".join(parts[:n])
        have = set(read(parent, "cgroup.subtree_control").split())
        for ctrl in sorted(wanted - have):
            write(parent, "cgroup.subtree_control", f"+{ctrl}")


class KubeletSlices:
    """Pods and containers as units of a kubepods slice named `kubepods` (a unique name by default)."""

    def __init__(self, kubepods: str | None = None) -> None:
        self.kubepods = kubepods or f"kp{uuid.uuid4().hex[:8]}"
        self.scopes: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def root(self) -> str:
        return f"{self.kubepods}.slice"

    def tier(self, tier: str) -> str:
        return f"{self.root}/{self.kubepods}-{tier}.slice"

    def pod_slice(self, tier: str, uid: str) -> str:
        return f"{self.kubepods}-{tier}-pod{uid.replace('-', '_')}.slice"

    def pod(self, tier: str, uid: str) -> str:
        return f"{self.tier(tier)}/{self.pod_slice(tier, uid)}"

    def container(self, tier: str, uid: str, argv: Sequence[str] = ("sleep", "3600"),
                  properties: Sequence[str] = ()) -> str:
        """Start `argv` in a new `cri-containerd-<id>.scope` of the pod; its cgroup path (relative)."""
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        unit = f"cri-containerd-{cid}.scope"
        # Delegate=yes, as runc asks for a container's scope: systemd keeps every controller enabled for it.
        cmd = ["systemd-run", "--scope", "--quiet", f"--unit={unit}", f"--slice={self.pod_slice(tier, uid)}",
               "--property=Delegate=yes"]
        cmd += [f"--property={p}" for p in properties]
        proc = subprocess.Popen([*cmd, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.scopes.append((unit, proc))
        rel = f"{self.pod(tier, uid)}/{unit}"
        if not wait(lambda: bool(read(rel, "cgroup.procs")), 120):
            done = proc.poll() is not None and proc.stderr is not None
            err = proc.stderr.read().decode(errors="replace") if done and proc.stderr else ""
            raise AssertionError(f"scope {unit} did not start: exit status {proc.poll()} {err}")
        enable_controllers(rel)
        return rel

    def slices(self) -> list[str]:
        """Every slice unit of this layout systemd knows (for cleanup)."""
        out = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=slice",
                              f"{self.kubepods}*"], capture_output=True, text=True, timeout=60, check=False)
        return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]

    def cleanup(self) -> None:
        for unit, proc in self.scopes:
            subprocess.run(["systemctl", "stop", unit], capture_output=True, timeout=60, check=False)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for unit in reversed(self.slices()):
            subprocess.run(["systemctl", "stop", unit], capture_output=True, timeout=60, check=False)
        subprocess.run(["systemctl", "reset-failed"], capture_output=True, timeout=60, check=False)
        # The agent's runtime properties live in /run/systemd/system.control/<unit>.d: removed with the units.
        for unit in [u for u in os.listdir("/run/systemd/system.control")
                     if u.startswith(self.kubepods)] if os.path.isdir("/run/systemd/system.control") else []:
            shutil.rmtree(f"/run/systemd/system.control/{unit}", ignore_errors=True)
        systemctl("daemon-reload")
        assert not (CGROUP2 / self.root).exists(), f"{self.root} left behind"
