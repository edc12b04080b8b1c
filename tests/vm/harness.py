"""Boot the cgroup v2 + systemd guest once, run pytest inside it as root, and bring the results back.

    python3 tests/vm/harness.py --image DIR --venv DIR [--results DIR] [--timeout S] [-- PYTEST ARGS]
    python3 tests/vm/harness.py --image DIR --venv DIR --data-disk MIB --command 'SHELL COMMAND'

The guest (tests/vm/image.sh) boots under QEMU with its disk in snapshot mode (nothing it writes survives),
the checkout and the guest venv shared over 9p at their host paths, and a private control directory (9p tag
"ctl") holding tests/vm/job.sh and its settings. The guest's pytest output is streamed here line by line,
prefixed "[guest] ". With --results, the guest's junit XML, its output, the console log and `run.json`
(timings, exit status, or why the run failed) are copied there for the host's test run
(tests/vm/test_vm_guest.py). Exits with the guest pytest's status, or 75 when the guest did not get to run
it.

Opt-in, for what needs a disk of its own (scripts/vm-bench: bench/io.py in the guest): `--data-disk MIB` gives
the guest a second virtio disk, `/dev/vdb`, a sparse raw file of that size in the run's temporary directory
(removed with it), attached with `cache=none` (the host's page cache out of the way: the guest's writes reach
the host's disk); `--command` runs a shell command in the checkout instead of pytest (its status is the
run's). Without them the run is as it always was.
Standard library only: any python3 on the host runs it.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
DEFAULT_SELECTION = HERE / "selection"
BOOT_TIMEOUT_S = 180.0  # from QEMU's start to the job's first line (emulation on a loaded 2-core host)
HARNESS_FAILED = 75  # EX_TEMPFAIL: the guest did not get to run pytest (pytest exits 0-5)
CMDLINE = (
    "console=ttyS0 quiet loglevel=3 systemd.show_status=false systemd.unified_cgroup_hierarchy=1 "
    "cgroup_no_v1=all psi=1 panic=-1 mitigations=off tsc=reliable coloc.job"
)


def qemu_argv(image: Path, ctl: Path, venv: Path, cpus: int, memory_mib: int,
              data_disk: Path | None = None) -> list[str]:
    """QEMU's command line: TCG (no usable KVM is assumed), PVH boot of the ELF kernel, shares over 9p; with
    `data_disk`, that raw file as the guest's second disk (`/dev/vdb`)."""
    def share(path: Path, tag: str, ro: bool = False) -> list[str]:
        opts = f"local,path={path},mount_tag={tag},security_model=none" + (",readonly=on" if ro else "")
        return ["-virtfs", opts]

    return [
        "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-machine", "pc",
        "-accel", "tcg,thread=multi,tb-size=256", "-cpu", "Nehalem", "-smp", str(cpus), "-m", str(memory_mib),
        "-kernel", str(image / "vmlinux"), "-initrd", str(image / "initrd.img"), "-append", CMDLINE,
        "-drive", f"file={image / 'rootfs.img'},if=virtio,format=raw,snapshot=on",
        *(["-drive", f"file={data_disk},if=virtio,format=raw,cache=none"] if data_disk else []),
        *share(ctl, "ctl"), *share(CHECKOUT, "share"), *share(venv, "venv", ro=True),
        "-nic", "none", "-display", "none", "-monitor", "none", "-serial", f"file:{ctl / 'console.log'}",
        "-no-reboot",
    ]


def selection() -> list[str]:
    """The default guest selection: tests/vm/selection, one pytest argument per line (# comments); a test
    path this checkout does not have is left out, with a note."""
    out = []
    for line in DEFAULT_SELECTION.read_text().splitlines():
        arg = line.split("#", 1)[0].strip()
        if not arg:
            continue
        if not arg.startswith("-") and not (CHECKOUT / arg.split("::", 1)[0]).exists():
            print(f"guest selection: {arg} is not in this checkout; left out", flush=True)
            continue
        out.append(arg)
    return out


def write_job(ctl: Path, venv: Path, pytest_args: list[str], command: str = "") -> None:
    shutil.copy(HERE / "job.sh", ctl / "job.sh")
    env = {"CHECKOUT": str(CHECKOUT), "VENV": str(venv), "PYTEST_ARGS": shlex.join(pytest_args),
           "COMMAND": command}
    (ctl / "env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))


class Streamer:
    """Prints what the guest appends to a file, whole lines only, prefixed."""

    def __init__(self, path: Path, prefix: str = "[guest] ") -> None:
        self.path, self.prefix, self.pos, self.partial = path, prefix, 0, b""

    def pump(self, final: bool = False) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return
        self.pos += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
        for line in lines:
            print(self.prefix + line.decode(errors="replace"), flush=True)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no console output)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop QEMU itself (by its own pid; it was not started through a wrapper)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(image: Path, venv: Path, pytest_args: list[str], timeout_s: float, results: Path | None,
        cpus: int, memory_mib: int, data_disk_mib: int = 0, command: str = "") -> int:
    """Boot, run, collect; returns the exit status (see the module docstring)."""
    for name in ("vmlinux", "initrd.img", "rootfs.img"):
        if not (image / name).is_file():
            return _fail(results, f"guest image incomplete: {image / name} is missing (build-image.sh)")
    if not (venv / "bin" / "python").exists():
        return _fail(results, f"guest venv incomplete: {venv}/bin/python is missing (tests/vm/guest-venv.sh)")
    if shutil.which("qemu-system-x86_64") is None:
        return _fail(results, "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)")
    ctl = Path(tempfile.mkdtemp(prefix="coloc-vm-"))
    try:
        write_job(ctl, venv, pytest_args, command)
        data_disk = None
        if data_disk_mib > 0:
            data_disk = ctl / "data.img"
            with data_disk.open("wb") as f:
                f.truncate(data_disk_mib << 20)  # sparse: only what the guest writes takes room
        status = _boot_and_wait(ctl, image, venv, timeout_s, cpus, memory_mib, data_disk)
        if results is not None:
            results.mkdir(parents=True, exist_ok=True)
            for name in ("junit.xml", "job.log", "console.log"):
                if (ctl / name).exists():
                    shutil.copy(ctl / name, results / name)
            (results / "run.json").write_text(json.dumps(status, indent=1) + "\n")
        if status["error"]:
            print(f"guest stage failed: {status['error']}", file=sys.stderr)
            return HARNESS_FAILED
        rc = status["rc"]
        return rc if isinstance(rc, int) else HARNESS_FAILED
    finally:
        shutil.rmtree(ctl, ignore_errors=True)


def _boot_and_wait(ctl: Path, image: Path, venv: Path, timeout_s: float, cpus: int,
                   memory_mib: int, data_disk: Path | None = None) -> dict[str, object]:
    started = time.monotonic()
    status: dict[str, object] = {"image": image.name, "kernel": _read(image / "kernel-release"),
                                 "error": "", "rc": None, "boot_s": None, "wall_s": None, "qemu_cpu_s": None}
    argv = qemu_argv(image, ctl, venv, cpus, memory_mib, data_disk)
    log = Streamer(ctl / "job.log")
    with open(ctl / "qemu.err", "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=ctl)
    try:
        while proc.poll() is None:
            now = time.monotonic() - started
            if status["boot_s"] is None and (ctl / "started").exists():
                status["boot_s"] = round(now, 1)
                print(f"[guest] booted in {now:.1f} s", flush=True)
            if status["boot_s"] is None and now > BOOT_TIMEOUT_S:
                status["error"] = f"the guest did not start its job within {BOOT_TIMEOUT_S:.0f} s"
                break
            if now > timeout_s:
                status["error"] = f"the guest run took more than {timeout_s:.0f} s"
                break
            log.pump()
            time.sleep(0.2)
    finally:
        _stop(proc)
        log.pump(final=True)
    status["wall_s"] = round(time.monotonic() - started, 1)
    # QEMU is this process's only child: its CPU time says how much of the wall time the guest was busy
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    status["qemu_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
    print(f"[guest] QEMU: {status['qemu_cpu_s']} s of CPU in {status['wall_s']} s", flush=True)
    rc_file = ctl / "rc"
    if not status["error"]:
        if rc_file.exists():
            status["rc"] = int(rc_file.read_text().strip() or HARNESS_FAILED)
        else:
            qemu_err = _read(ctl / "qemu.err")
            status["error"] = (f"the guest stopped without finishing its job (QEMU exit {proc.returncode}"
                               + (f": {qemu_err}" if qemu_err else "") + ")")
    if status["error"]:
        print(f"guest console (last lines):\n{_tail(ctl / 'console.log')}", file=sys.stderr)
    return status


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return ""


def _fail(results: Path | None, why: str) -> int:
    print(f"guest stage failed: {why}", file=sys.stderr)
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
        (results / "run.json").write_text(json.dumps({"error": why, "rc": None}) + "\n")
    return HARNESS_FAILED


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--image", type=Path, required=True, help="image directory (tests/vm/build-image.sh)")
    p.add_argument("--venv", type=Path, required=True, help="guest venv (tests/vm/guest-venv.sh)")
    p.add_argument("--results", type=Path, help="where to copy junit.xml, job.log, console.log, run.json")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run (default 900)")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--memory", type=int, default=2048, help="MiB")
    p.add_argument("--data-disk", type=int, default=0, metavar="MIB",
                   help="a second virtio disk (/dev/vdb) of this many MiB, sparse, in the run's temp dir")
    p.add_argument("--command", default="", help="a shell command to run in the guest instead of pytest")
    p.add_argument("pytest_args", nargs="*", help="pytest arguments (default: tests/vm/selection)")
    args = p.parse_args(argv)
    # A SIGTERM (a CI timeout) unwinds like Ctrl-C, through the `finally` that stops QEMU.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    pytest_args = args.pytest_args or ([] if args.command else selection())
    return run(args.image.resolve(), args.venv.resolve(), pytest_args, args.timeout,
               args.results.resolve() if args.results else None, args.cpus, args.memory, args.data_disk,
               args.command)


if __name__ == "__main__":
    sys.exit(main())
