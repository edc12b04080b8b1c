"""Pure parsers: exact kernel formats in, frozen values out; malformed input names file and line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgroups.errors import UnknownFormat
from cgroups.parsers import (
    CpuMax,
    Psi,
    format_cpuset,
    format_psi,
    kv_int,
    parse_cfs,
    parse_cpu_max,
    parse_cpu_stat_v1,
    parse_cpu_stat_v2,
    parse_cpuset,
    parse_int,
    parse_meminfo,
    parse_memory_limit,
    parse_proc_stat,
    parse_procs,
    parse_psi,
    psi_some_total,
)

# Captured from kernel 6.18 on this machine (v1 cpu.stat) and from the kernel's documented v2 format.
V1_CPU_STAT = b"nr_periods 12\nnr_throttled 7\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n"
V2_CPU_STAT = (
    b"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnice_usec 0\n"
    b"nr_periods 40\nnr_throttled 10\nthrottled_usec 35000\nnr_bursts 0\nburst_usec 0\n"
)
V1_MEMORY_STAT = (
    b"cache 9220096\nrss 4059136\nrss_huge 0\nshmem 9068544\nmapped_file 7630848\n"
    b"inactive_anon 0\nactive_anon 1531904\ninactive_file 12288\nactive_file 139264\n"
    b"hierarchical_memory_limit 9223372036854771712\n"
    b"total_cache 34451456\ntotal_rss 6983680\ntotal_inactive_anon 2703360\n"
    b"total_active_anon 1552384\ntotal_inactive_file 10887168\ntotal_active_file 14495744\n"
)
V2_MEMORY_STAT = (
    b"anon 1048576\nfile 8388608\nkernel 212992\nkernel_stack 16384\nshmem 0\n"
    b"file_mapped 0\nfile_dirty 0\ninactive_anon 1048576\nactive_anon 0\n"
    b"inactive_file 6291456\nactive_file 2097152\nunevictable 0\n"
)


def test_cpu_stat_v1_and_v2() -> None:
    v1 = parse_cpu_stat_v1(V1_CPU_STAT)
    assert (v1.nr_periods, v1.nr_throttled, v1.throttled_ns, v1.usage_ns) == (12, 7, 123456789, None)
    v2 = parse_cpu_stat_v2(V2_CPU_STAT)
    assert (v2.nr_periods, v2.nr_throttled, v2.throttled_ns, v2.usage_ns) == (
        40,
        10,
        35_000_000,
        2_500_000_000,
    )


def test_cpu_stat_v2_without_cpu_controller_has_no_throttling() -> None:
    core_only = b"usage_usec 98384666\nuser_usec 72585334\nsystem_usec 25799332\nnice_usec 0\n"
    stat = parse_cpu_stat_v2(core_only)
    assert (stat.usage_ns, stat.nr_periods, stat.nr_throttled) == (98_384_666_000, 0, 0)


def test_memory_stat_takes_hierarchical_keys_on_v1() -> None:
    assert kv_int(V1_MEMORY_STAT, b"total_inactive_file", "memory.stat") == 10887168
    assert kv_int(V1_MEMORY_STAT, b"inactive_file", "memory.stat") == 12288  # not the total_ one
    assert kv_int(V2_MEMORY_STAT, b"anon", "memory.stat") == 1048576  # first line


def test_limits() -> None:
    assert parse_memory_limit(b"max\n", "memory.max") is None
    assert parse_memory_limit(b"9223372036854771712\n", "memory.limit_in_bytes") is None
    assert parse_memory_limit(b"536870912\n", "memory.max") == 536870912
    assert parse_cpu_max(b"max 100000\n") == CpuMax(None, 100000)
    assert parse_cpu_max(b"50000 100000\n") == CpuMax(50000, 100000)
    assert parse_cfs(b"-1\n", b"100000\n") == CpuMax(None, 100000)
    assert parse_cfs(b"20000\n", b"10000\n") == CpuMax(20000, 10000)


def test_psi_with_and_without_full() -> None:
    text = (
        b"some avg10=0.39 avg60=0.73 avg300=1.28 total=7593379\n"
        b"full avg10=0.10 avg60=0.20 avg300=0.30 total=42\n"
    )
    psi = parse_psi(text)
    assert (psi.some_avg10, psi.some_avg300, psi.some_total_us) == (0.39, 1.28, 7593379)
    assert (psi.full_avg10, psi.full_total_us) == (0.10, 42)
    some_only = parse_psi(b"some avg10=1.00 avg60=2.00 avg300=3.00 total=9\n")
    assert some_only.full_avg10 is None and some_only.some_total_us == 9


@pytest.mark.parametrize(
    "data",
    [
        b"some avg10=0.39 avg60=0.73 avg300=1.28 total=7593379\n"
        b"full avg10=0.10 avg60=0.20 avg300=0.30 total=42\n",
        b"some avg10=100.00 avg60=0.00 avg300=0.00 total=0\n",
        b"some avg10=1 avg60=2.5 avg300=3e1 total=12\n",  # not the kernel's shape, still what parse_psi reads
        b"some  avg10=0.00 avg60=0.00 avg300=0.00 total=5",
    ],
)
def test_psi_some_total_is_parse_psi_some_total(data: bytes) -> None:
    assert psi_some_total(data) == parse_psi(data).some_total_us


@pytest.mark.parametrize(
    "data",
    [
        b"some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n",
        b"some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 total=1\n",
        b"",
    ],
)
def test_psi_some_total_refuses_what_parse_psi_refuses(data: bytes) -> None:
    with pytest.raises(UnknownFormat):
        parse_psi(data, "cpu.pressure")
    with pytest.raises(UnknownFormat) as err:
        psi_some_total(data, "cpu.pressure")
    assert "cpu.pressure" in str(err.value)


def test_procs_meminfo_proc_stat() -> None:
    assert parse_procs(b"1\n22\n333\n") == (1, 22, 333)
    assert parse_procs(b"") == ()
    info = parse_meminfo(
        b"MemTotal:       24684132 kB\nMemFree:        23975460 kB\nMemAvailable:   24179260 kB\n"
    )
    assert info.total_bytes == 24684132 * 1024
    assert info.used_bytes == (24684132 - 24179260) * 1024
    stat = parse_proc_stat(
        b"cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 50 2 25 500 10 0 1 1 0 0\ncpu1 50 3 25 500 10 1 1 2 0 0\n"
        b"intr 12345 0 0\nctxt 999\n"
    )
    assert stat.ncpu == 2
    assert stat.cpu.busy == 100 + 5 + 50 + 1 + 2 + 3
    assert stat.cpu.total == stat.cpu.busy + 1000 + 20


@pytest.mark.parametrize(
    ("parse", "data", "file", "line_no"),
    [
        (lambda d: parse_int(d, "cpuacct.usage"), b"12abc\n", "cpuacct.usage", 1),
        (lambda d: parse_cpu_stat_v1(d, "cpu.stat"), b"nr_periods 1\nnr_throttled x\n", "cpu.stat", 2),
        (lambda d: parse_cpu_stat_v1(d, "cpu.stat"), b"nr_periods 1\nnr_throttled 2\n", "cpu.stat", 1),
        (
            lambda d: parse_psi(d, "cpu.pressure"),
            b"some avg10=x avg60=0 avg300=0 total=0\n",
            "cpu.pressure",
            1,
        ),
        (
            lambda d: parse_psi(d, "io.pressure"),
            b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            b"fool avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "io.pressure",
            2,
        ),
        (lambda d: parse_cpu_max(d, "cpu.max"), b"lots 100000\n", "cpu.max", 1),
        (lambda d: parse_cpuset(d, "cpuset.cpus"), b"0-3,x\n", "cpuset.cpus", 1),
        (lambda d: parse_cpuset(d, "cpuset.cpus"), b"3-1\n", "cpuset.cpus", 1),
        (lambda d: parse_procs(d, "cgroup.procs"), b"1\n2\nthree\n", "cgroup.procs", 3),
        (lambda d: kv_int(d, b"total_inactive_file", "memory.stat"), V2_MEMORY_STAT, "memory.stat", 1),
        (lambda d: parse_meminfo(d, "/proc/meminfo"), b"MemTotal: 1 kB\nbroken line\n", "/proc/meminfo", 2),
        (lambda d: parse_proc_stat(d, "/proc/stat"), b"intr 1 2 3\n", "/proc/stat", 1),
    ],
)
def test_unknown_format_names_file_and_line(parse, data: bytes, file: str, line_no: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownFormat) as err:
        parse(data)
    assert err.value.file == file
    assert err.value.line_no == line_no
    assert file in str(err.value) and f"line {line_no}" in str(err.value)


def test_cpuset_examples() -> None:
    assert parse_cpuset(b"0-3,5\n") == (0, 1, 2, 3, 5)
    assert parse_cpuset(b"\n") == ()
    assert format_cpuset([5, 0, 1, 2, 3, 3]) == "0-3,5"
    assert format_cpuset([0, 2, 4]) == "0,2,4"


@given(st.sets(st.integers(min_value=0, max_value=511), max_size=64))
def test_cpuset_round_trip(cpus: set[int]) -> None:
    text = format_cpuset(cpus)
    assert parse_cpuset(text) == tuple(sorted(cpus))
    assert parse_cpuset(text.encode() + b"\n") == tuple(sorted(cpus))
    # canonical: formatting the parsed value gives the same text the kernel would print
    assert format_cpuset(parse_cpuset(text)) == text


_avg = st.integers(min_value=0, max_value=10000).map(lambda n: n / 100)
_total = st.integers(min_value=0, max_value=2**63)


@given(_avg, _avg, _avg, _total, st.one_of(st.none(), st.tuples(_avg, _avg, _avg, _total)))
def test_psi_round_trip(
    a10: float, a60: float, a300: float, total: int, full: tuple[float, float, float, int] | None
) -> None:
    psi = Psi(a10, a60, a300, total, *(full if full else (None, None, None, None)))
    assert parse_psi(format_psi(psi)) == psi
