"""Lay out cgroup v2 directories in a temp dir with the kernel's exact file formats (for tests).

Formats from the kernel's cgroup v2 documentation (Documentation/admin-guide/cgroup-v2.rst).
"""

from __future__ import annotations

from pathlib import Path

CPU_STAT = (
    "usage_usec {usage}\nuser_usec {usage}\nsystem_usec 0\nnice_usec 0\n"
    "nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {throttled_usec}\n"
    "nr_bursts 0\nburst_usec 0\n"
)
MEMORY_STAT = (
    "anon 104857600\nfile 52428800\nkernel 1048576\nkernel_stack 65536\npagetables 262144\nsock 0\n"
    "shmem 0\nfile_mapped 4096\nfile_dirty 0\nfile_writeback 0\nanon_thp 0\ninactive_anon 0\n"
    "active_anon 104857600\ninactive_file {inactive}\nactive_file 20971520\nunevictable 0\n"
    "slab_reclaimable 0\nslab_unreclaimable 0\npgfault 100\npgmajfault 0\n"
)
PSI = "some avg10={a:.2f} avg60=1.00 avg300=0.50 total={t}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def write_cgroup(
    d: Path,
    *,
    usage: int = 0,
    periods: int = 0,
    throttled: int = 0,
    throttled_usec: int = 0,
    current: int = 157286400,
    inactive: int = 31457280,
    limit: str = "max",
    psi_avg10: float = 0.0,
    psi_total: int = 0,
) -> None:
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "cpu.stat": CPU_STAT.format(
            usage=usage, periods=periods, throttled=throttled, throttled_usec=throttled_usec
        ),
        "cpu.max": "max 100000\n",
        "cpu.weight": "100\n",
        "cpu.idle": "0\n",
        "cpuset.cpus": "\n",
        "memory.current": f"{current}\n",
        "memory.stat": MEMORY_STAT.format(inactive=inactive),
        "memory.max": f"{limit}\n",
        "memory.high": "max\n",
        "cpu.pressure": PSI.format(a=psi_avg10, t=psi_total),
        "memory.pressure": PSI.format(a=0.0, t=0),
        "cgroup.procs": "",
        "cgroup.freeze": "0\n",
        "cgroup.kill": "",
    }
    for name, text in files.items():
        (d / name).write_text(text)
