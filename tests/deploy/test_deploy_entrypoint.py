"""The image's exact command, run as the standalone overlay's DaemonSet runs it: it starts, `/readyz`
answers ready on the manifest's port, and SIGTERM stops it with exit 0 within
terminationGracePeriodSeconds, the BE tier's knobs as they were before it started.

No container engine here, so the container is built from the manifests by hand, in a private mount
namespace (`unshare -m --propagation private`: nothing leaks to the host's mounts, and all of it goes
when the process does). The root is an overlay of this machine's root (standing in for the image),
remounted read-only as `readOnlyRootFilesystem` says. Every volumeMount of the rendered DaemonSet is
mounted at its mountPath: hostPath volumes as directories of the test's temp dir (rw), except the
cgroup volume, which is the host's real /sys/fs/cgroup (rw); the ConfigMap as a read-only directory
holding the rendered ConfigMap's keys; the emptyDir as a tmpfs of its sizeLimit. /proc is mounted
fresh (hostPID: the host's pid namespace), /sys read-only, /dev bound. `chroot` enters it and
`setpriv` takes the container's uid/gid, keeps only the manifest's added capabilities (bounding and
inheritable sets: uid 0 then has exactly those, as under a container runtime) and sets no_new_privs
when allowPrivilegeEscalation is false. Not simulated: seccomp, resource limits (and there is no pod
network namespace to simulate: hostNetwork).

Taken from the repo, not from a copy: ENTRYPOINT, CMD and ENV of the Dockerfile's final stage (the
DaemonSet's command/args must equal them), and from `kubectl kustomize deploy/overlays/standalone` the
ConfigMap, the volumes, the mounts, the container's securityContext, its port and the grace period.

Changed from the real thing, and only this:
- the image installs the agent into a venv whose bin, /opt/coloc-agent/bin, its ENV puts first on
  PATH; here the project's `.venv/bin` takes that place, so `coloc-agent` is `.venv/bin/coloc-agent`;
- in the copy of the config, `cgroups.root` is a unique test root `coloc-test-<uuid>/kubepods` (the
  overlay's is `kubepods`) laid out as the kubelet lays it out (burstable; besteffort with cpu.shares
  2 and one BE pod burning CPU), so nothing else on the machine is touched; this config does not set
  tiers up (the kubelet owns them), so the tree must be left exactly as found;
- `metrics.port` only when the manifest's port is taken on this machine at test time (hostNetwork:
  the agent binds the node's port); the test prints so when it happens.
No kubelet or API server is involved: the standalone overlay uses neither.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from deploy_render import REPO, image_env, image_exec_form, needs_kubectl, one, pod_spec
from kit.agentproc import proc_status, readyz
from kit.realcg import RealRoot

from agent.config.agent import AgentConfig, load_config
from agent.config.load import parse_bytes
from agent.demo.spawn import workload_argv

pytestmark = [
    needs_kubectl, pytest.mark.cgroups, pytest.mark.slow,
    pytest.mark.skipif(any(shutil.which(t) is None for t in ("unshare", "chroot", "setpriv")),
                       reason="needs unshare, chroot and setpriv (util-linux, coreutils)"),
]

OVERLAY = "standalone"
IMAGE_BIN = "/opt/coloc-agent/bin"  # the Dockerfile's venv
VENV_BIN = str(Path(sys.executable).parent)
BASE_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NODE_NAME = "entrypoint-node"  # the downward API's spec.nodeName
CAPS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7,
        "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21,
        "SYS_RESOURCE": 24}
KNOB_FILES = ("cpuset.cpus", "cpuset.mems", "cpu.idle", "cpu.cfs_quota_us", "cpu.cfs_period_us",
              "cpu.shares", "cpu.max", "cpu.weight")
BE_POD = "kubepods/besteffort/pod-batch"


@dataclass(frozen=True)
class Mount:
    """One of the container's mounts: `source` a host directory to bind (None: a tmpfs of `size` bytes)."""

    path: str
    source: Path | None
    read_only: bool
    size: int = 0


@dataclass(frozen=True)
class Container:
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    uid: int
    gid: int
    caps: list[str]
    no_new_privs: bool
    read_only_root: bool
    port: int
    grace_s: int


def build_container(tmp: Path, config_yaml: str) -> Container:
    """The standalone DaemonSet's container as a runtime would make it, volumes backed by `tmp`."""
    spec = pod_spec(OVERLAY)
    (c,) = spec["containers"]
    entrypoint, cmd = image_exec_form()
    # Kubernetes: `command` replaces ENTRYPOINT and `args` replaces CMD; the manifest spells them out.
    assert (c.get("command", entrypoint), c.get("args", cmd)) == (entrypoint, cmd), (
        "the DaemonSet's command/args differ from the image's ENTRYPOINT/CMD")
    env = image_env(BASE_IMAGE_PATH)
    assert IMAGE_BIN in env["PATH"].split(":"), f"the image's PATH no longer holds {IMAGE_BIN}: {env['PATH']}"
    env["PATH"] = env["PATH"].replace(IMAGE_BIN, VENV_BIN)
    for e in c.get("env", []):
        field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        assert "value" in e or field in ("spec.nodeName", "status.hostIP"), f"unhandled env entry {e}"
        env[e["name"]] = e.get("value", "127.0.0.1" if field == "status.hostIP" else NODE_NAME)
    cm = one(OVERLAY, "ConfigMap")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = [volume_mount(m, volumes[m["name"]], tmp, cm, config_yaml) for m in c["volumeMounts"]]
    sc = c["securityContext"]
    drop = sc.get("capabilities", {}).get("drop", [])
    assert drop == ["ALL"], f"the test models 'drop: [ALL]' only, got {drop}"
    return Container(
        argv=entrypoint + cmd, env=env, mounts=mounts, uid=sc["runAsUser"], gid=sc["runAsGroup"],
        caps=sc.get("capabilities", {}).get("add", []),
        no_new_privs=not sc.get("allowPrivilegeEscalation", True),
        read_only_root=bool(sc.get("readOnlyRootFilesystem")),
        port=probe_port(c), grace_s=spec.get("terminationGracePeriodSeconds", 30))


def probe_port(c: dict[str, Any]) -> int:
    """The readiness probe's port number (it names the container's port)."""
    get = c["readinessProbe"]["httpGet"]
    assert get["path"] == "/readyz", get
    port = get["port"]
    return int({p["name"]: p["containerPort"] for p in c["ports"]}[port] if isinstance(port, str) else port)


def volume_mount(m: dict[str, Any], vol: dict[str, Any], tmp: Path, cm: dict[str, Any],
                 config_yaml: str) -> Mount:
    ro = bool(m.get("readOnly"))
    if "hostPath" in vol:
        if vol["hostPath"]["path"] == "/sys/fs/cgroup":
            return Mount(m["mountPath"], Path("/sys/fs/cgroup"), ro)
        d = tmp / "volumes" / m["name"]
        d.mkdir(parents=True)
        return Mount(m["mountPath"], d, ro)
    if "configMap" in vol:
        assert vol["configMap"]["name"] == cm["metadata"]["name"], "the volume names another ConfigMap"
        d = tmp / "volumes" / m["name"]
        d.mkdir(parents=True)
        for key, text in cm["data"].items():
            (d / key).write_text(config_yaml if key == "config.yaml" else text)
        return Mount(m["mountPath"], d, ro)
    if "emptyDir" in vol:
        return Mount(m["mountPath"], None, ro, parse_bytes(vol["emptyDir"].get("sizeLimit", "64Mi"), "size"))
    raise AssertionError(f"volume {vol['name']}: kind not modelled by this test: {sorted(vol)}")


def namespace_script(ct: Container, tmp: Path) -> str:
    """The shell run inside the private mount namespace: build the container's root, then exec the command."""
    root, layers = tmp / "rootfs", tmp / "layers"
    root.mkdir()
    layers.mkdir()
    q = shlex.quote
    lines = [
        "set -eu",
        # The overlay's upper layer on a tmpfs: mountpoints made for the volumes never touch the host's disk.
        f"mount -t tmpfs -o size=16m,mode=755 coloc-layers {q(str(layers))}",
        f"mkdir {q(str(layers / 'upper'))} {q(str(layers / 'work'))}",
        f"mount -t overlay coloc-rootfs -o lowerdir=/,upperdir={layers}/upper,workdir={layers}/work "
        f"{q(str(root))}",
        f"mount -t proc proc {q(str(root / 'proc'))}",
        f"mount --rbind /sys {q(str(root / 'sys'))}",
        f"mount -o remount,bind,ro {q(str(root / 'sys'))}",
        f"mount --rbind /dev {q(str(root / 'dev'))}",
    ]
    for m in ct.mounts:
        # The image is this machine's root, so its symlinks (/var/run -> /run) resolve the same here.
        target = q(str(root) + os.path.realpath(m.path))
        lines.append(f"mkdir -p {target}")
        if m.source is None:
            lines.append(f"mount -t tmpfs -o size={m.size},mode=1777 coloc-emptydir {target}")
        else:
            lines.append(f"mount --rbind {q(str(m.source))} {target}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    # The checkout and its .venv stand in for the image's files: when they live under a path a volume
    # covers (a clone under /tmp, where the emptyDir goes), bind them back, read-only, where they were.
    for src in sorted({os.path.realpath(REPO), os.path.realpath(sys.prefix)}):
        target = q(str(root) + src)
        lines += [f"mkdir -p {target}", f"mount --rbind {q(src)} {target}",
                  f"mount -o remount,bind,ro {target}"]
    if ct.read_only_root:
        lines.append(f"mount -o remount,ro {q(str(root))}")
    caps = ",".join(["-all", *(f"+{c.lower()}" for c in ct.caps)])
    setpriv = ["setpriv", f"--reuid={ct.uid}", f"--regid={ct.gid}", "--clear-groups",
               f"--bounding-set={caps}", f"--inh-caps={caps}"]
    setpriv += ["--no-new-privs"] if ct.no_new_privs else []
    env = [f"{k}={v}" for k, v in ct.env.items()]
    lines.append("exec " + shlex.join(["chroot", str(root), "/usr/bin/env", "-i", *env, *setpriv, "--",
                                       *ct.argv]))
    return "\n".join(lines) + "\n"


def on_volume(ct: Container, path: str | None) -> Path:
    """Where the container's `path` (a file directly in a volume's mountPath) is on the host."""
    assert path, "no path"
    source = {m.path: m.source for m in ct.mounts}.get(os.path.dirname(path))
    assert source is not None, f"{path} is on no directory volume"
    return source / os.path.basename(path)


def port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def any_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def knobs(real_root: RealRoot) -> dict[str, str]:
    """Every cgroup under the test root and its CPU knobs, in every hierarchy (the tree 'as found')."""
    out: dict[str, str] = {}
    for top in real_root.dirs():
        for parent, _, files in os.walk(top):
            out[parent] = "dir"
            for f in files:
                if f in KNOB_FILES:
                    out[f"{parent}/{f}"] = Path(parent, f).read_text().strip()
    return out


def be_knobs(state: dict[str, str], real_root: RealRoot) -> dict[str, str]:
    be = [str(d / "kubepods" / "besteffort") for d in real_root.dirs()]
    return {k: v for k, v in state.items() if any(k.startswith(b + "/") for b in be)}


def root_mount_options(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"process {pid} has no root mount")


def wait_alive(pred: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the agent exited early ({proc.returncode}):\n{log.read_text()}")
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s:\n{log.read_text()[-4000:]}")


def kubelet_layout(real_root: RealRoot) -> None:
    """What the kubelet would have made before the agent starts: the QoS tiers and one BE pod burning CPU."""
    real_root.mkcg("kubepods/burstable")
    real_root.mkcg(BE_POD)
    shares = real_root.path("cpu", "kubepods/besteffort") / "cpu.shares"
    if shares.exists():
        shares.write_text("2")
    real_root.spawn(BE_POD, workload_argv("burn"))


def test_image_command_runs_read_only_as_the_manifest_says_and_goes_ready(
        real_root: RealRoot, tmp_path: Path) -> None:
    cfg = yaml.safe_load(one(OVERLAY, "ConfigMap")["data"]["config.yaml"])
    cfg["cgroups"]["root"] = f"{real_root.name}/kubepods"
    (c,) = pod_spec(OVERLAY)["containers"]
    assert cfg["metrics"]["port"] == probe_port(c), "the config's port is not the manifest's"
    port_note = ""
    if port_taken(probe_port(c)):
        port_note = f"port {probe_port(c)} is taken on this machine; metrics.port overridden"
        cfg["metrics"]["port"] = any_free_port()
    config_yaml = yaml.safe_dump(cfg)
    ct = build_container(tmp_path, config_yaml)
    loaded = check_paths(ct, config_yaml, tmp_path)
    port = loaded.metrics.port

    kubelet_layout(real_root)
    before = knobs(real_root)
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                 namespace_script(ct, tmp_path)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        run_and_stop(proc, ct, loaded, port, log, real_root, before)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if port_note:
            print(port_note)
    leaked = [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if str(tmp_path) in ln]
    assert not leaked, f"mounts leaked out of the private namespace: {leaked}"
    after = knobs(real_root)
    if loaded.cgroups.cleanup_on_exit and loaded.cgroups.setup_tiers:
        assert not real_root.path("cpu", "kubepods").exists(), "the agent's cgroup root was left behind"
    else:
        assert after == before, "the cgroup tree was not left as found: " + json.dumps(
            {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
             if before.get(k) != after.get(k)}, indent=1)


def check_paths(ct: Container, config_yaml: str, tmp: Path) -> AgentConfig:
    """The config's paths land on the manifest's volumes (else the read-only root would refuse them)."""
    path = tmp / "check.yaml"
    path.write_text(config_yaml)
    with mock.patch.dict(os.environ, {"HOST_IP": "127.0.0.1"}):  # the DaemonSet's status.hostIP
        loaded = load_config(path)
    by_path = {m.path: m for m in ct.mounts}
    assert ct.argv[-1].startswith(tuple(p + "/" for p in by_path)), "CMD's config file is on no volume"
    for name, wanted in (("state.path", os.path.dirname(loaded.state.path)),
                         ("api.socket_path", os.path.dirname(loaded.api.socket_path or "")),
                         ("cgroups.mount", loaded.cgroups.mount)):
        m = by_path.get(wanted)
        assert m is not None and not m.read_only, f"{name} {wanted!r} is on no writable volume"
    return loaded


def run_and_stop(proc: subprocess.Popen[bytes], ct: Container, cfg: AgentConfig, port: int, log: Path,
                 real_root: RealRoot, before: dict[str, str]) -> None:
    launched = time.monotonic()
    wait_alive(lambda: readyz(port)[0] == 200, 60, proc, log)
    ready_s = time.monotonic() - launched
    code, body = readyz(port)
    assert code == 200 and body["status"] == "ready", body
    # The exec chain (unshare, sh, chroot, env, setpriv) ends in the agent itself: same pid.
    status = {k: proc_status(proc.pid, k) for k in ("Uid", "Gid", "CapEff", "NoNewPrivs")}
    assert status["Uid"].split() == [str(ct.uid)] * 4 and status["Gid"].split() == [str(ct.gid)] * 4
    assert int(status["CapEff"], 16) == sum(1 << CAPS[c] for c in ct.caps), status["CapEff"]
    assert status["NoNewPrivs"] == ("1" if ct.no_new_privs else "0")
    assert ("ro" in root_mount_options(proc.pid)) == ct.read_only_root
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    assert f"{VENV_BIN}/coloc-agent".encode() in cmdline and b"/etc/coloc-agent/config.yaml" in cmdline
    assert on_volume(ct, cfg.api.socket_path).exists(), "no API socket on the 'run' volume"
    # The BE pod burns CPU: the agent suppresses the BE tier (its cpuset), so there is something to restore.
    # cpu.idle stays 0: the kubelet owns this tier and writes its cpu.shares (docs/coexistence.md).
    tier = real_root.dirs("kubepods/besteffort")
    wanted = {f"{d}/{k}" for d in tier for k in ("cpuset.cpus",) if f"{d}/{k}" in before}
    assert len(wanted) == 1, wanted

    def changed() -> set[str]:
        now = knobs(real_root)
        return {k for k in be_knobs(now, real_root) if now[k] != before.get(k)}

    wait_alive(lambda: wanted <= changed(), 30, proc, log)
    suppressed = changed()
    assert not any(k.endswith("/cpu.idle") for k in suppressed), suppressed

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(ct.grace_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no exit within terminationGracePeriodSeconds {ct.grace_s}") from None
    took = time.monotonic() - started
    text = log.read_text()
    assert rc == 0, text
    assert "Traceback" not in text, text
    assert on_volume(ct, cfg.state.path).exists(), "no ledger flushed to the 'state' volume"
    print(f"ready after {ready_s:.2f} s, suppressed {sorted(suppressed)}; "
          f"SIGTERM to exit {took:.2f} s")
