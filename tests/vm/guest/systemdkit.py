"""The kubelet's systemd cgroup driver, as far as cgroups go: QoS and pod slices made as transient units over
D-Bus (`StartTransientUnit`, as the kubelet's libcontainer does), container scopes made by `systemd-run
--scope` (as runc does: a `cri-containerd-<id>.scope` with Delegate=yes in the pod's slice).

    with SystemdPods() as node:
        pod = node.pod("besteffort", CPUWeight=1)               # kubepods-besteffort-pod<uid>.slice
        proc = node.container(pod, ["sleep", "60"])            # cri-containerd-<64 hex>.scope, running
        node.cgroup(pod.slice)                                 # its directory under /sys/fs/cgroup

Every unit made is stopped on the way out (processes killed by systemd), then `kubepods.slice` if this kit
started it; their runtime drop-ins are removed and systemd reloaded. Anything left below kubepods.slice
afterwards (a directory someone made by hand that systemd could not remove) is killed and removed, and
reported by `leftovers()` so the test can fail on it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CGROUP2 = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods.slice"
TIER_SLICES = {"besteffort": "kubepods-besteffort.slice", "burstable": "kubepods-burstable.slice"}


def _run(*argv: str) -> str:
    out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def _busctl_props(props: dict[str, Any]) -> list[str]:
    """`a(sv)` arguments for busctl: strings, booleans and unsigned 64-bit integers (what slices need)."""
    args = [str(len(props))]
    for name, value in props.items():
        if isinstance(value, bool):
            args += [name, "b", "true" if value else "false"]
        elif isinstance(value, int):
            args += [name, "t", str(value)]
        else:
            args += [name, "s", str(value)]
    return args


def unit_cgroup(unit: str) -> Path:
    """The cgroup directory systemd gave `unit` (its ControlGroup property)."""
    rel = _run("systemctl", "show", "-P", "ControlGroup", unit).strip()
    if not rel:
        raise RuntimeError(f"{unit} has no control group (not active?)")
    return CGROUP2 / rel.lstrip("/")


def is_active(unit: str) -> bool:
    out = subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False, timeout=60)
    return out.returncode == 0


@dataclass
class Pod:
    tier: str
    uid: str
    slice: str  # unit name, e.g. kubepods-besteffort-pod<uid with _>.slice
    containers: list[str] = field(default_factory=list)  # scope unit names

    @property
    def rel(self) -> str:
        """The pod's cgroup relative to kubepods.slice (what the agent's Layout builds)."""
        tier = TIER_SLICES.get(self.tier)
        return f"{tier}/{self.slice}" if tier else self.slice


class SystemdPods:
    """Pods and containers laid out by systemd as the kubelet's systemd driver lays them out."""

    def __init__(self) -> None:
        self.units: list[str] = []
        self.procs: list[subprocess.Popen[Any]] = []
        self.started_kubepods = not is_active(KUBEPODS)
        self._left: list[str] = []

    def __enter__(self) -> SystemdPods:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- units ---------------------------------------------------------------------------------------

    def start_slice(self, name: str, **props: Any) -> Path:
        """A transient slice over D-Bus, as the kubelet makes its QoS and pod slices; its cgroup dir."""
        props = {"Description": f"test slice {name}", "DefaultDependencies": False, **props}
        _run("busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
             "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
             name, "replace", *_busctl_props(props), "0")
        self.units.append(name)
        self._wait_active(name)
        return unit_cgroup(name)

    def tier(self, tier: str, **props: Any) -> Path:
        """kubepods.slice and the QoS slice of `tier` (besteffort: CPUWeight 1, as the kubelet's 2 shares)."""
        name = TIER_SLICES[tier]
        if name in self.units or is_active(name):
            return unit_cgroup(name)
        defaults: dict[str, Any] = {"CPUWeight": 1} if tier == "besteffort" else {}
        return self.start_slice(name, **{**defaults, **props})

    def pod(self, tier: str = "besteffort", uid: str | None = None, **props: Any) -> Pod:
        """A pod slice below its QoS slice (guaranteed pods sit directly in kubepods.slice)."""
        uid = uid or str(uuid.uuid4())
        if tier == "guaranteed":
            name = f"kubepods-pod{uid.replace('-', '_')}.slice"
            if not is_active(KUBEPODS):
                self.start_slice(KUBEPODS)
        else:
            self.tier(tier)
            name = f"kubepods-{tier}-pod{uid.replace('-', '_')}.slice"
        self.start_slice(name, **props)
        return Pod(tier, uid, name)

    def container(self, pod: Pod, argv: Sequence[str], cid: str | None = None, **props: Any
                  ) -> subprocess.Popen[Any]:
        """`argv` running in `cri-containerd-<cid>.scope` in the pod's slice (systemd-run --scope execs it
        once the scope holds it); the returned process is the container's first process."""
        cid = cid or secrets.token_hex(32)
        unit = f"cri-containerd-{cid}.scope"
        extra = [a for k, v in props.items() for a in ("-p", f"{k}={v}")]
        proc = subprocess.Popen(
            ["systemd-run", "--quiet", "--scope", f"--unit={unit}", f"--slice={pod.slice}",
             "-p", "Delegate=yes", *extra, "--", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.procs.append(proc)
        self.units.append(unit)
        pod.containers.append(unit)
        self._wait_active(unit, proc)
        return proc

    def set_property(self, unit: str, **props: Any) -> None:
        """`systemctl set-property --runtime`, as the kubelet updates a pod's resources."""
        _run("systemctl", "set-property", "--runtime", unit, *(f"{k}={v}" for k, v in props.items()))

    def cgroup(self, unit: str) -> Path:
        return unit_cgroup(unit)

    def property(self, unit: str, name: str) -> str:
        """A unit property as `systemctl show` prints it (e.g. CPUQuotaPerSecUSec: "infinity", "700ms")."""
        return _run("systemctl", "show", "-P", name, unit).strip()

    def reload(self) -> None:
        """`systemctl daemon-reload`: systemd re-applies every unit's cgroup properties."""
        _run("systemctl", "daemon-reload")

    def _wait_active(self, unit: str, proc: subprocess.Popen[Any] | None = None, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not is_active(unit):
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{unit}: systemd-run exited with {proc.returncode} before it was active")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{unit} did not become active within {timeout:.0f} s")
            time.sleep(0.05)

    # -- teardown ------------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Stop every unit made here (children first), kubepods.slice if this kit started it, then remove
        (and report) whatever is left below kubepods.slice."""
        stop = list(reversed(self.units))
        if self.started_kubepods:
            stop.append(KUBEPODS)
        for unit in stop:
            subprocess.run(["systemctl", "stop", unit], check=False, capture_output=True, timeout=120)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        # Runtime properties set on the units (SetUnitProperties, the agent's) stay as drop-ins; and a
        # transient slice unloaded while named as another unit's parent stays "not found" to systemd until a
        # reload (a later pod slice below it then fails to start): both go, so the next test starts afresh.
        for unit in stop:
            shutil.rmtree(f"/run/systemd/system.control/{unit}.d", ignore_errors=True)
        subprocess.run(["systemctl", "reset-failed"], check=False, capture_output=True, timeout=120)
        subprocess.run(["systemctl", "daemon-reload"], check=False, capture_output=True, timeout=120)
        self.units.clear()
        if self.started_kubepods:
            self._left = remove_tree(CGROUP2 / KUBEPODS)

    def leftovers(self) -> list[str]:
        """What systemd could not remove below kubepods.slice at cleanup (removed by the kit since)."""
        return list(self._left)


def remove_tree(top: Path) -> list[str]:
    """Kill everything in `top` and below, remove the directories deepest first; the paths that were there."""
    if not top.is_dir():
        return []
    below = [Path(p) / d for p, subdirs, _ in os.walk(top) for d in subdirs]
    dirs = sorted(below, key=lambda q: -len(q.parts))
    dirs.append(top)
    for d in dirs:
        with contextlib.suppress(OSError):
            (d / "cgroup.kill").write_text("1")
    for d in dirs:
        for _ in range(250):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
    return [str(d.relative_to(CGROUP2)) for d in dirs]
