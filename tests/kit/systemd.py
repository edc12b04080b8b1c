"""The kubelet's systemd cgroup driver on a real systemd + pure cgroup v2 host (the test guest), as far as
cgroups go, and its cleanup.

The kubelet makes each pod a slice (`<kubepods>-<tier>-pod<uid with _>.slice` below `<kubepods>.slice` and
`<kubepods>-<tier>.slice`) and the runtime each container a scope in it (`cri-containerd-<id>.scope`, with
Delegate=yes, as runc asks for it). Two ways to lay them out:

    node = SystemdPods()                           # below kubepods.slice
    pod = node.pod("besteffort", CPUWeight=1)      # slices over D-Bus (StartTransientUnit), as the kubelet's
    proc = node.container(pod, ["sleep", "60"])    #   libcontainer makes them; a scope in the pod's slice
    rel = node.scope("besteffort", uid)            # `systemd-run --scope --slice=<pod slice>`: systemd makes
                                                   #   the pod and tier slices from the name

Every unit made is stopped at cleanup (processes killed by systemd), then, when this kit started
`<kubepods>.slice`, every slice of the layout; their runtime drop-ins are removed and systemd reloaded.
Anything left below `<kubepods>.slice` afterwards (a directory systemd could not remove) is killed and
removed, and reported by `leftovers()` so the test can fail on it.
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

from kit.poll import wait
from kit.realcg import try_write

CGROUP2 = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods.slice"
DROP_INS = Path("/run/systemd/system.control")


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
    return try_write(CGROUP2 / rel / name, value)


def systemctl(*args: str) -> str:
    """`systemctl ARGS`; its output, or RuntimeError with systemctl's message when it fails."""
    out = subprocess.run(["systemctl", *args], check=False, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"systemctl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def _quietly(*argv: str) -> None:
    subprocess.run(argv, check=False, capture_output=True, timeout=120)


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
    rel = systemctl("show", "-P", "ControlGroup", unit).strip()
    if not rel:
        raise RuntimeError(f"{unit} has no control group (not active?)")
    return CGROUP2 / rel.lstrip("/")


def is_active(unit: str) -> bool:
    out = subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False, timeout=60)
    return out.returncode == 0


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


@dataclass
class Pod:
    tier: str
    uid: str
    slice: str  # unit name, e.g. kubepods-besteffort-pod<uid with _>.slice
    rel: str  # the pod's cgroup relative to the kubepods slice (what the agent's Layout builds)
    containers: list[str] = field(default_factory=list)  # scope unit names


class SystemdPods:
    """Pods and containers laid out by systemd, as the kubelet's systemd driver lays them out, below
    `<kubepods>.slice` (a name of the test's own keeps them apart from the node's real pods)."""

    def __init__(self, kubepods: str = "kubepods") -> None:
        self.kubepods = kubepods
        self.units: list[str] = []
        self.procs: list[subprocess.Popen[Any]] = []
        self.started_kubepods = not is_active(self.root)
        self._left: list[str] = []

    def __enter__(self) -> SystemdPods:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- names ---------------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The kubepods slice: its unit name, which is also its cgroup below /sys/fs/cgroup."""
        return f"{self.kubepods}.slice"

    def tier_slice(self, tier: str) -> str:
        return f"{self.kubepods}-{tier}.slice"

    def tier_rel(self, tier: str) -> str:
        """The QoS tier's cgroup relative to /sys/fs/cgroup."""
        return f"{self.root}/{self.tier_slice(tier)}"

    def pod_slice(self, tier: str, uid: str) -> str:
        if tier == "guaranteed":
            return f"{self.kubepods}-pod{uid.replace('-', '_')}.slice"
        return f"{self.kubepods}-{tier}-pod{uid.replace('-', '_')}.slice"

    def pod_rel(self, tier: str, uid: str) -> str:
        """The pod's cgroup relative to /sys/fs/cgroup."""
        if tier == "guaranteed":
            return f"{self.root}/{self.pod_slice(tier, uid)}"
        return f"{self.tier_rel(tier)}/{self.pod_slice(tier, uid)}"

    # -- units over D-Bus, as the kubelet makes them -------------------------------------------------

    def start_slice(self, name: str, **props: Any) -> Path:
        """A transient slice over D-Bus, as the kubelet makes its QoS and pod slices; its cgroup dir."""
        props = {"Description": f"test slice {name}", "DefaultDependencies": False, **props}
        out = subprocess.run(
            ["busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
             "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
             name, "replace", *_busctl_props(props), "0"], check=False, capture_output=True, text=True,
            timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"StartTransientUnit {name} failed ({out.returncode}): {out.stderr.strip()}")
        self.units.append(name)
        self._wait_active(name)
        return unit_cgroup(name)

    def tier(self, tier: str, **props: Any) -> Path:
        """The kubepods slice and the QoS slice of `tier` (besteffort: CPUWeight 1, as the kubelet's 2
        shares); the tier's cgroup dir."""
        name = self.tier_slice(tier)
        if name in self.units or is_active(name):
            return unit_cgroup(name)
        defaults: dict[str, Any] = {"CPUWeight": 1} if tier == "besteffort" else {}
        return self.start_slice(name, **{**defaults, **props})

    def pod(self, tier: str = "besteffort", uid: str | None = None, **props: Any) -> Pod:
        """A pod slice below its QoS slice (guaranteed pods sit directly in the kubepods slice)."""
        uid = uid or str(uuid.uuid4())
        if tier == "guaranteed":
            if not is_active(self.root):
                self.start_slice(self.root)
        else:
            self.tier(tier)
        name = self.pod_slice(tier, uid)
        self.start_slice(name, **props)
        return Pod(tier, uid, name, self.pod_rel(tier, uid).removeprefix(self.root + "/"))

    def container(self, pod: Pod, argv: Sequence[str], cid: str | None = None, **props: Any
                  ) -> subprocess.Popen[Any]:
        """`argv` running in `cri-containerd-<cid>.scope` in the pod's slice (systemd-run --scope execs it
        once the scope holds it); the returned process is the container's first process."""
        unit = f"cri-containerd-{cid or secrets.token_hex(32)}.scope"
        extra = [a for k, v in props.items() for a in ("-p", f"{k}={v}")]
        proc = subprocess.Popen(
            ["systemd-run", "--quiet", "--scope", f"--unit={unit}", f"--slice={pod.slice}",
             "-p", "Delegate=yes", *extra, "--", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.procs.append(proc)
        self.units.append(unit)
        pod.containers.append(unit)
        self._wait_active(unit, proc)
        return proc

    # -- a container whose slices systemd makes from the name ----------------------------------------

    def scope(self, tier: str, uid: str, argv: Sequence[str] = ("sleep", "3600"),
              properties: Sequence[str] = ()) -> str:
        """Start `argv` in a new `cri-containerd-<id>.scope` of the pod (`systemd-run --scope`, the pod and
        tier slices made by systemd from the slice's name); the scope's cgroup relative to /sys/fs/cgroup."""
        unit = f"cri-containerd-{secrets.token_hex(32)}.scope"
        cmd = ["systemd-run", "--scope", "--quiet", f"--unit={unit}", f"--slice={self.pod_slice(tier, uid)}",
               "--property=Delegate=yes", *(f"--property={p}" for p in properties)]
        proc = subprocess.Popen([*cmd, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(proc)
        self.units.append(unit)
        rel = f"{self.pod_rel(tier, uid)}/{unit}"
        if not wait(lambda: bool(read(rel, "cgroup.procs")), 120):
            done = proc.poll() is not None and proc.stderr is not None
            err = proc.stderr.read().decode(errors="replace") if done and proc.stderr else ""
            raise AssertionError(f"scope {unit} did not start: exit status {proc.poll()} {err}")
        enable_controllers(rel)
        return rel

    # -- reading and changing units ------------------------------------------------------------------

    def set_property(self, unit: str, **props: Any) -> None:
        """`systemctl set-property --runtime`, as the kubelet updates a pod's resources."""
        systemctl("set-property", "--runtime", unit, *(f"{k}={v}" for k, v in props.items()))

    def cgroup(self, unit: str) -> Path:
        return unit_cgroup(unit)

    def property(self, unit: str, name: str) -> str:
        """A unit property as `systemctl show` prints it (e.g. CPUQuotaPerSecUSec: "infinity", "700ms")."""
        return systemctl("show", "-P", name, unit).strip()

    def reload(self) -> None:
        """`systemctl daemon-reload`: systemd re-applies every unit's cgroup properties."""
        systemctl("daemon-reload")

    def _wait_active(self, unit: str, proc: subprocess.Popen[Any] | None = None, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not is_active(unit):
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{unit}: systemd-run exited with {proc.returncode} before it was active")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{unit} did not become active within {timeout:.0f} s")
            time.sleep(0.05)

    # -- teardown ------------------------------------------------------------------------------------

    def slices(self) -> list[str]:
        """Every slice unit of this layout systemd knows."""
        out = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=slice",
                              f"{self.kubepods}*"], capture_output=True, text=True, timeout=60, check=False)
        return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]

    def cleanup(self) -> None:
        """Stop every unit made here (children first), every slice of the layout if this kit started the
        kubepods slice, then remove (and keep for `leftovers()`) whatever is left below it."""
        stop = list(reversed(self.units))
        if self.started_kubepods:
            stop += sorted((s for s in self.slices() if s not in stop), key=len, reverse=True)
            stop += [] if self.root in stop else [self.root]
        for unit in stop:
            _quietly("systemctl", "stop", unit)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        # Runtime properties set on the units (SetUnitProperties, the agent's) stay as drop-ins; and a
        # transient slice unloaded while named as another unit's parent stays "not found" to systemd until a
        # reload (a later pod slice below it then fails to start): both go, so the next test starts afresh.
        for unit in stop:
            shutil.rmtree(DROP_INS / f"{unit}.d", ignore_errors=True)
        _quietly("systemctl", "reset-failed")
        _quietly("systemctl", "daemon-reload")
        self.units.clear()
        if self.started_kubepods:
            self._left = remove_tree(CGROUP2 / self.root)

    def leftovers(self) -> list[str]:
        """What systemd could not remove below the kubepods slice at cleanup (removed by the kit since)."""
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
