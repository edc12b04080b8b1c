"""Classify a cgroup's egress as BE without any tc classifier: a 4-instruction `cgroup_skb/egress` program.

HTB looks at `skb->priority` before any filter: a packet whose priority is the classid of a leaf goes to
that leaf. The program sets `skb->priority` to the BE class for every packet a socket of the cgroup (or of
any cgroup below it: cgroup BPF programs are inherited) sends, and lets it pass. That is how YARN
containers, which share the host's address, are told apart here: this kernel has neither the `fw` nor the
`cgroup` classifier. It needs cgroup2 (a hybrid host's `unified` mount will do, if the containers are in
that tree) and CAP_SYS_ADMIN / CAP_BPF. Loaded with raw bpf(2) through ctypes: no compiler, no libbpf.
A socket keeps the cgroup it was created in, which suits YARN: container-executor starts the process in
its cgroup before it opens any socket.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import struct

BPF_PROG_LOAD, BPF_PROG_ATTACH, BPF_PROG_DETACH = 5, 8, 9
BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD, BPF_PROG_QUERY = 13, 15, 16
PROG_INFO_NAME_OFFSET, PROG_INFO_LEN = 64, 80  # struct bpf_prog_info: name[16] after map_ids
BPF_PROG_TYPE_CGROUP_SKB, BPF_CGROUP_INET_EGRESS, BPF_F_ALLOW_MULTI = 8, 1, 2
SKB_PRIORITY_OFFSET = 32  # offsetof(struct __sk_buff, priority)
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
PROG_NAME = b"coloc_be_prio"
log = logging.getLogger("coloc.network")


class BpfError(OSError):
    """bpf(2) failed; the message says which step and, for a load, what the verifier said."""


def _bpf_attr(cmd: int, attr: bytes) -> tuple[int, bytes]:
    """bpf(2) with `attr`; its result and the attr as the kernel left it (a query writes counts back)."""
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise BpfError(f"bpf(2): no syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, 128)
    r = int(libc.syscall(nr, cmd, buf, 128))
    if r < 0:
        e = ctypes.get_errno()
        raise BpfError(e, os.strerror(e))
    return r, buf.raw


def _bpf(cmd: int, attr: bytes) -> int:
    return _bpf_attr(cmd, attr)[0]


def load_priority_program(classid: int) -> int:
    """Load the program that sets `skb->priority = classid`; return its fd."""
    def ins(code: int, dst: int, src: int, off: int, imm: int) -> bytes:
        return struct.pack("<BBhi", code, dst | (src << 4), off, imm)

    insns = (ins(0xB7, 2, 0, 0, classid - (1 << 32) if classid >= 1 << 31 else classid)  # r2 = classid
             + ins(0x63, 1, 2, SKB_PRIORITY_OFFSET, 0)  # *(u32 *)(r1 + priority) = r2
             + ins(0xB7, 0, 0, 0, 1)  # r0 = 1: let the packet pass
             + ins(0x95, 0, 0, 0, 0))  # exit
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = struct.pack("<IIQQIIQII16sII", BPF_PROG_TYPE_CGROUP_SKB, len(insns) // 8, ctypes.addressof(code),
                       ctypes.addressof(lic), 1, len(log), ctypes.addressof(log), 0, 0, PROG_NAME, 0,
                       BPF_CGROUP_INET_EGRESS)
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except BpfError as err:
        verifier = log.value.decode(errors="replace").strip()
        raise BpfError(err.errno, f"loading the BE priority program: {err.strerror}"
                       + (f"; verifier: {verifier}" if verifier else "")) from None


def _attached_ids(cgroup_fd: int) -> list[int]:
    """The ids of the egress programs attached to the cgroup (`BPF_PROG_QUERY`)."""
    ids = (ctypes.c_uint32 * 64)()
    attr = struct.pack("<IIIIQI", cgroup_fd, BPF_CGROUP_INET_EGRESS, 0, 0, ctypes.addressof(ids), len(ids))
    try:
        _, back = _bpf_attr(BPF_PROG_QUERY, attr)
    except BpfError as err:
        raise BpfError(err.errno, f"querying the programs attached: {err.strerror}") from None
    count = struct.unpack_from("<I", back, 24)[0]  # prog_cnt, written back by the kernel
    return list(ids[:min(count, len(ids))])


def _is_ours(prog_id: int) -> int | None:
    """An fd of the program `prog_id` when it is one of ours (by its name), else None."""
    try:
        fd = _bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("<III", prog_id, 0, 0))
    except BpfError as err:
        if err.errno in (errno.EPERM, errno.EACCES):  # CAP_BPF without CAP_SYS_ADMIN, or an LSM: say so
            raise BpfError(err.errno, f"looking at attached program {prog_id}: {err.strerror}") from None
        return None  # gone meanwhile
    info = ctypes.create_string_buffer(PROG_INFO_LEN)
    try:
        _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, PROG_INFO_LEN, ctypes.addressof(info)))
        name = info.raw[PROG_INFO_NAME_OFFSET:PROG_INFO_NAME_OFFSET + 16].rstrip(b"\0")
    except BpfError:
        name = b""
    if name == PROG_NAME:
        return fd
    os.close(fd)
    return None


def _ours(cgroup_fd: int) -> list[int]:
    fds: list[int] = []
    try:
        for prog_id in _attached_ids(cgroup_fd):
            fd = _is_ours(prog_id)
            if fd is not None:
                fds.append(fd)
    except BpfError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def ours_attached(cgroup_dir: str) -> int:
    """How many programs of ours (by name) are attached to the cgroup's egress."""
    cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fds = _ours(cg)
        for fd in fds:
            os.close(fd)
        return len(fds)
    finally:
        os.close(cg)


def _detach_left(cgroup_fd: int) -> int:
    """Detach the programs of ours an earlier run left attached (it was killed before its `detach`)."""
    n = 0
    for fd in _ours(cgroup_fd):
        try:
            _bpf(BPF_PROG_DETACH, struct.pack("<IIII", cgroup_fd, fd, BPF_CGROUP_INET_EGRESS, 0))
            n += 1
        except BpfError:
            pass  # detached meanwhile
        finally:
            os.close(fd)
    return n


def detach_left_at(cgroup_dir: str) -> int:
    """Detach every program of ours attached to the cgroup's egress; how many (a run with network control
    off, for what a killed run left)."""
    cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _detach_left(cg)
    finally:
        os.close(cg)


class CgroupPriority:
    """The program attached to one cgroup2 directory; `detach` takes it off again (idempotent). Programs of
    ours (by name) an earlier, killed run left attached there are taken off first (`replaced` counts them)."""

    def __init__(self, cgroup_dir: str, classid: int) -> None:
        self.cgroup_dir = cgroup_dir
        self._prog = load_priority_program(classid)
        try:
            self._cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            os.close(self._prog)
            raise
        try:
            self.replaced = _detach_left(self._cg)  # one program of ours, not one per crash
        except BpfError as err:  # not fatal: the attach below still classifies YARN
            self.replaced = 0
            log.warning("egress: programs an earlier run left on %s could not be looked at or taken off: %s",
                        cgroup_dir, err)
        try:
            _bpf(BPF_PROG_ATTACH, struct.pack("<IIII", self._cg, self._prog, BPF_CGROUP_INET_EGRESS,
                                              BPF_F_ALLOW_MULTI))
        except BpfError as err:
            self._close()
            raise BpfError(err.errno, f"attaching to {cgroup_dir}: {err.strerror}") from None
        self.attached = True

    def _close(self) -> None:
        os.close(self._cg)
        os.close(self._prog)

    def detach(self) -> None:
        if not self.attached:
            return
        self.attached = False
        try:
            _bpf(BPF_PROG_DETACH, struct.pack("<IIII", self._cg, self._prog, BPF_CGROUP_INET_EGRESS, 0))
        finally:
            self._close()
