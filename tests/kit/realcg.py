"""Real cgroups for tests: a private root in every hierarchy, real processes in it, full teardown.

The `real_root` fixture (registered in tests/conftest.py) yields a `RealRoot`:

    @pytest.mark.cgroups
    def test_something(real_root: RealRoot) -> None:
        real_root.mkcg("besteffort/pod1")                       # in every hierarchy, parents too
        proc = real_root.spawn("besteffort/pod1", ["sleep", "30"])  # already inside when it execs
        reader = CgroupReader(real_root.hierarchy, real_root.name)
        writer = CgroupWriter(real_root.hierarchy, real_root.name)
        real_root.path("cpu", "besteffort/pod1")                 # absolute directory, for raw checks

- `name` is `coloc-test-<uuid>`, created under each v1 controller that is mounted (cpu, cpuacct,
  cpuset, memory, freezer, pids) and under the cgroup2 mount (PSI files there). On a pure v2 host it
  is created once in the unified tree; cpu/cpuset/memory/pids are enabled in a cgroup's
  `cgroup.subtree_control` when its first child is made (v2 keeps processes in leaves only).
- `spawn` is race-free: the child writes its own pid into `cgroup.procs` of every hierarchy before it
  execs, so the program never runs outside the cgroup.
- Teardown runs even when the test fails: it thaws everything, kills every process found in any
  cgroup under the root (and every spawned process), reaps them, and removes the directories
  bottom-up. It then checks that nothing is left and fails the test if something is.
- Where cgroups cannot be created, the fixture skips with the reason; with COLOC_REQUIRE_CGROUPS=1
  it fails instead. Mark such tests `@pytest.mark.cgroups`.

Only paths under the private root are ever written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from cgroups.discovery import Hierarchy, discover
from cgroups.reader import CgroupReader
from cgroups.writer import CgroupWriter

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "freezer", "pids", "blkio")
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "pids", "io")


class CgroupsUnavailable(Exception):
    """Real cgroups cannot be created here; the message says why."""


def required() -> bool:
    return os.environ.get("COLOC_REQUIRE_CGROUPS") == "1"


def real_root_or_skip(hierarchy: Hierarchy | None = None) -> RealRoot:
    """A `RealRoot` (in `hierarchy`, or in every hierarchy of this machine) for a test or fixture, or the test
    skipped where cgroups cannot be created here: failed instead when COLOC_REQUIRE_CGROUPS=1."""
    import pytest  # only a test skips; the benches import this module too

    try:
        return RealRoot(hierarchy)
    except CgroupsUnavailable as e:
        if required():
            pytest.fail(f"COLOC_REQUIRE_CGROUPS=1 but real cgroups are unavailable: {e}")
        pytest.skip(f"real cgroups unavailable: {e}")


def write_file(path: Path, value: str) -> None:
    """One write(2) of `value`, as the kernel's cgroup files want it (and as other writers make it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def try_write(path: Path, value: str) -> str | None:
    """`write_file`; the error text when the kernel refuses it, None when it took it."""
    try:
        write_file(path, value)
    except OSError as err:
        return f"{path}={value}: {err.strerror}"
    return None


def cpus(source: str | Path) -> set[int]:
    """The CPUs of a cpuset list ("0-2,5"), given as text or as the file that holds it."""
    text = source.read_text() if isinstance(source, Path) else source
    out: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


class RealRoot:
    """A private cgroup root `coloc-test-<uuid>` in every hierarchy of this machine."""

    made_names: ClassVar[list[str]] = []  # every root name made in this process, for the leak check

    def __init__(self, hierarchy: Hierarchy | None = None, prefix: str = "coloc-test") -> None:
        try:
            self.hierarchy = hierarchy or discover()
        except Exception as e:  # no /proc, no mounts: not a cgroup host
            raise CgroupsUnavailable(f"cannot discover cgroup mounts: {e}") from e
        self.name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        RealRoot.made_names.append(self.name)
        self.mounts: dict[str, Path] = {
            c: self.hierarchy.v1[c] for c in V1_CONTROLLERS if c in self.hierarchy.v1
        }
        if self.hierarchy.unified is not None:
            self.mounts["unified"] = self.hierarchy.unified
        if not self.mounts:
            raise CgroupsUnavailable("no cgroup controllers mounted")
        self.procs: list[subprocess.Popen[Any]] = []
        self._made: list[Path] = []
        try:
            for top in self._tops():
                os.mkdir(top / self.name)
                self._made.append(top / self.name)
                self._after_mkdir(top / self.name)
        except OSError as e:
            self.cleanup()
            why = f"{e.strerror} (needs root and writable cgroup mounts)"
            raise CgroupsUnavailable(f"cannot create {top / self.name}: {why}") from e

    # -- layout ------------------------------------------------------------------------------------

    def _tops(self) -> list[Path]:
        return list(dict.fromkeys(self.mounts.values()))

    def path(self, ctrl: str, rel: str = "") -> Path:
        """Absolute directory of `rel` in the hierarchy of `ctrl` ("unified" for the cgroup2 mount)."""
        mount = self.mounts.get(ctrl) or self.mounts.get("unified")
        if mount is None:
            raise KeyError(ctrl)
        base = mount / self.name
        return base / rel if rel else base

    def text(self, ctrl: str, rel: str, name: str) -> str:
        """The file `name` of `rel` in the hierarchy of `ctrl` ("unified": the cgroup2 mount), as the kernel
        wrote it."""
        return (self.path(ctrl, rel) / name).read_text()

    def read(self, ctrl: str, rel: str, name: str) -> str:
        """`text` without the surrounding whitespace."""
        return self.text(ctrl, rel, name).strip()

    def dirs(self, rel: str = "") -> list[Path]:
        """`rel` in every hierarchy, each mount once."""
        return [top / self.name / rel if rel else top / self.name for top in self._tops()]

    def _after_mkdir(self, d: Path) -> None:
        if self.hierarchy.is_v1("cpuset") and d.is_relative_to(self.hierarchy.v1["cpuset"]):
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (d / name).read_text().strip():
                    write_file(d / name, (d.parent / name).read_text().strip())

    def _enable_for_children(self, d: Path) -> None:
        """v2: a parent hands controllers to its children (only a parent: v2 keeps tasks in leaves)."""
        if self.hierarchy.mode != "v2":
            return
        available = set((d / "cgroup.controllers").read_text().split())
        enabled = set((d / "cgroup.subtree_control").read_text().split())
        for ctrl in V2_CONTROLLERS:
            if ctrl in available and ctrl not in enabled:
                write_file(d / "cgroup.subtree_control", f"+{ctrl}")

    def mkcg(self, rel: str) -> str:
        """Create `rel` (and its parents) below the root in every hierarchy; returns `rel`."""
        parts = [p for p in rel.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad test cgroup path {rel!r}")
        for top in self._tops():
            d = top / self.name
            for part in parts:
                parent, d = d, d / part
                if not d.is_dir():
                    self._enable_for_children(parent)
                    os.mkdir(d)
                    self._after_mkdir(d)
        return "/".join(parts)

    # -- processes ---------------------------------------------------------------------------------

    def spawn(self, rel: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside `rel` in every hierarchy (it joins before it execs)."""
        targets = [str(d / "cgroup.procs") for d in self.dirs(rel) if d.is_dir()]
        if not targets:
            raise FileNotFoundError(f"test cgroup {rel!r} does not exist; call mkcg first")

        def join_cgroups() -> None:  # runs in the child between fork and exec
            for t in targets:
                fd = os.open(t, os.O_WRONLY)
                os.write(fd, b"0")  # "0" moves the writing process itself
                os.close(fd)

        popen.setdefault("stdin", subprocess.DEVNULL)
        popen.setdefault("stdout", subprocess.DEVNULL)
        proc = subprocess.Popen(list(argv), preexec_fn=join_cgroups, **popen)  # noqa: PLW1509
        self.procs.append(proc)
        return proc

    def writer_reader(self) -> tuple[CgroupWriter, CgroupReader]:
        """The agent's writer and reader on this root."""
        return CgroupWriter(self.hierarchy, self.name), CgroupReader(self.hierarchy, self.name)

    def pids(self, rel: str = "", ctrl: str = "cpu") -> list[int]:
        text = (self.path(ctrl, rel) / "cgroup.procs").read_text()
        return [int(x) for x in text.split()]

    def _all_dirs(self) -> list[Path]:
        """Every cgroup directory under the root, deepest first."""
        found: list[Path] = []
        for top in self._tops():
            base = top / self.name
            if not base.is_dir():
                continue
            for parent, subdirs, _ in os.walk(base):
                found.extend(Path(parent) / s for s in subdirs)
            found.append(base)
        return sorted(found, key=lambda p: -len(p.parts))

    # -- teardown ----------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Thaw, kill, reap, remove. Raises RuntimeError if anything under the root survives."""
        dirs = self._all_dirs()
        for d in reversed(dirs):  # parents first: a frozen parent keeps its children frozen
            with contextlib.suppress(OSError):
                if (d / "freezer.state").exists():
                    write_file(d / "freezer.state", "THAWED")
                if (d / "cgroup.freeze").exists():
                    write_file(d / "cgroup.freeze", "0")
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
        deadline = time.monotonic() + 10
        while True:
            alive = self._kill_members(dirs)
            for proc in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.05)
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        leftovers: list[str] = []
        for d in dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        leftovers.append(f"{d}: {e.strerror}")
                        break
                    time.sleep(0.02)  # exiting tasks leave the cgroup a moment after they die
            else:
                leftovers.append(f"{d}: still busy")
        for proc in self.procs:
            if proc.poll() is None:
                leftovers.append(f"process {proc.pid} still running")
        if leftovers:
            raise RuntimeError("test cgroups left behind: " + "; ".join(leftovers))

    @staticmethod
    def _members(dirs: list[Path]) -> set[int]:
        pids: set[int] = set()
        for d in dirs:
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return pids

    def _kill_members(self, dirs: list[Path]) -> bool:
        """SIGKILL every member; a pidfd taken before a second membership check means a pid recycled
        by a process outside the root is never hit."""
        pids = self._members(dirs)
        fds: dict[int, int] = {}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                fds[pid] = os.pidfd_open(pid)
        still = self._members(dirs)
        for pid, fd in fds.items():
            with contextlib.suppress(ProcessLookupError):
                if pid in still:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        return bool(pids)


@contextlib.contextmanager
def real_cgroup_root(prefix: str = "coloc-test") -> Iterator[RealRoot]:
    """A RealRoot for the duration of a `with` block (raises CgroupsUnavailable if impossible)."""
    root = RealRoot(prefix=prefix)
    try:
        yield root
    finally:
        root.cleanup()


def leftover_dirs(names: Sequence[str]) -> list[Path]:
    """Of the roots `names`, the directories still present in any cgroup mount of this machine (the cgroup2
    one included, even when a test's RealRoot was made without it)."""
    try:
        h = discover()
    except Exception:  # not a cgroup host: nothing can be left
        return []
    mounts = list(dict.fromkeys([*h.v1.values(), *([h.unified] if h.unified is not None else [])]))
    return [m / n for n in names for m in mounts if (m / n).is_dir()]


def need_v1(root: RealRoot, *ctrls: str) -> None:
    """Skip the test unless every controller of `ctrls` is a v1 hierarchy here."""
    import pytest  # only tests call this: the benches that use the kit need no pytest

    missing = [c for c in ctrls if not root.hierarchy.is_v1(c)]
    if missing:
        pytest.skip(f"needs v1 controllers {missing} (this host is {root.hierarchy.mode})")


def alive(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (which still answers kill 0)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
