"""The journal of holdings (`cgroups/holdings.py`) through the one writer, on real v1 cgroups: written before
a knob changes owner and never at a steady write; a run killed between the journal and the knob leaves
nothing the next run cannot give back; another boot's or a damaged journal gives nothing back."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from kit.holdings import held as journal_held
from kit.realcg import RealRoot

from cgroups.holdings import Holder, Holding, Journal
from cgroups.writer import CgroupWriter

pytestmark = [pytest.mark.cgroups]
EXACT = Holder("test_exact")
MOVING = Holder("test_moving", moving=True)
MI = 1 << 20


class _Killed(Exception):
    pass


class _DiesAfterTheJournal(Journal):
    def hold(self, holding: Holding) -> None:
        super().hold(holding)
        raise _Killed  # the process dies here: the journal names a value the knob does not hold yet


def _writer(root: RealRoot, path: Path, boot: str = "boot-1", kind: type[Journal] = Journal) -> CgroupWriter:
    journal = kind(path, boot)
    journal.load()
    return CgroupWriter(root.hierarchy, root.name, journal=journal)


def _limit(root: RealRoot) -> int:
    return int((root.path("memory", "be") / "memory.limit_in_bytes").read_text())


@pytest.fixture
def v1(real_root: RealRoot) -> RealRoot:
    if not real_root.hierarchy.is_v1("memory") or not real_root.hierarchy.is_v1("cpu"):
        pytest.skip("v1 files")
    real_root.mkcg("be")
    return real_root


def test_the_journal_is_written_when_a_knob_changes_owner_and_not_at_a_steady_write(
        v1: RealRoot, tmp_path: Path) -> None:
    w = _writer(v1, tmp_path / "held")
    with w.held_by(EXACT):
        w.set_memory_limit("be", 512 * MI)
    assert w.journal.stats.writes == 1
    with w.held_by(EXACT):
        for _ in range(20):  # a steady pass: the value is in place
            w.set_memory_limit("be", 512 * MI)
    assert w.journal.stats.writes == 1
    with w.held_by(MOVING):  # a quota that moves at every tick is one holding, journaled once
        for quota in range(20_000, 100_000, 5_000):
            w.set_cpu_quota("be", quota)
    assert w.journal.stats.writes == 2
    with w.held_by(EXACT):  # a new value of an exact holding: journaled before it is written
        w.set_memory_limit("be", 768 * MI)
    assert w.journal.stats.writes == 3
    held = {k: w.journal.held[k].encode() for k in w.journal.held}
    assert journal_held(tmp_path / "held") == {k: h["holder"] for k, h in held.items()}
    assert held[("memory_limit", "be")]["ours"] == [512 * MI, 768 * MI]
    quota = held[("cpu_quota", "be")]
    assert quota["ours"] is None and quota["give_back"] == [None, 100_000]
    with w.held_by(EXACT):  # the value before: the holding ends
        w.set_memory_limit("be", None)
    assert ("memory_limit", "be") not in w.journal.held


def test_a_run_killed_between_the_journal_and_the_knob_leaves_nothing_the_next_cannot_give_back(
        v1: RealRoot, tmp_path: Path) -> None:
    before = _limit(v1)
    with pytest.raises(_Killed):
        w = _writer(v1, tmp_path / "held", kind=_DiesAfterTheJournal)
        with w.held_by(EXACT):
            w.set_memory_limit("be", 512 * MI)
    assert _limit(v1) == before, "the knob was written before the journal"
    nxt = _writer(v1, tmp_path / "held")
    assert nxt.settle(EXACT) == 0 and nxt.journal.held == {}, "nothing to give back: it reads as before"
    # a held value about to change: killed after the journal names the new one, before its write
    w = _writer(v1, tmp_path / "held")
    with w.held_by(EXACT):
        w.set_memory_limit("be", 512 * MI)
    with pytest.raises(_Killed):
        dying = _writer(v1, tmp_path / "held", kind=_DiesAfterTheJournal)
        with dying.held_by(EXACT):
            dying.set_memory_limit("be", 768 * MI)
    assert _limit(v1) == 512 * MI
    nxt = _writer(v1, tmp_path / "held")
    assert nxt.settle(EXACT) == 1 and _limit(v1) == before and nxt.journal.held == {}


def test_another_writers_value_is_left_and_counted(v1: RealRoot, tmp_path: Path) -> None:
    w = _writer(v1, tmp_path / "held")
    with w.held_by(EXACT):
        w.set_memory_limit("be", 512 * MI)
    (v1.path("memory", "be") / "memory.limit_in_bytes").write_text(str(256 * MI))  # after the crash
    nxt = _writer(v1, tmp_path / "held")
    assert nxt.settle(EXACT) == 0 and _limit(v1) == 256 * MI
    assert nxt.journal.stats.left[("memory_limit", "unknown")] == 1 and nxt.journal.held == {}


def test_a_claimed_holding_keeps_its_value_to_give_back(v1: RealRoot, tmp_path: Path) -> None:
    w = _writer(v1, tmp_path / "held")
    with w.held_by(EXACT):
        w.set_memory_limit("be", 512 * MI)
    again = _writer(v1, tmp_path / "held")
    with again.held_by(EXACT):  # the next run's first pass wants the same: claimed, nothing given back
        again.set_memory_limit("be", 512 * MI)
    assert again.settle(EXACT) == 0 and _limit(v1) == 512 * MI
    with again.held_by(EXACT):
        again.set_memory_limit("be", None)  # given back by this run: the holding ends
    assert again.journal.held == {}


def test_another_boots_or_a_damaged_journal_gives_nothing_back(v1: RealRoot, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    w = _writer(v1, tmp_path / "held", boot="boot-1")
    with w.held_by(EXACT):
        w.set_memory_limit("be", 512 * MI)
    other = _writer(v1, tmp_path / "held", boot="boot-2")
    assert other.journal.held == {} and other.settle(EXACT) == 0 and _limit(v1) == 512 * MI
    head = json.dumps({"format": "coloc-agent/holdings/v2", "boot_id": "boot-1", "scope": ""}).encode()
    outside = {"hold": {"knob": "cpu_quota", "cgroup": "../../etc", "holder": "x",
                        "give_back": [None, 100000], "ours": None}}
    wrong = {"hold": {"knob": "cpu_quota", "cgroup": "be", "holder": "x", "give_back": [1.5, 100000],
                      "ours": None}}
    for bad in (b"{", b'{"format": "x"}', head + b"\n" + json.dumps(outside).encode() + b"\n",
                head + b"\n" + json.dumps(wrong).encode() + b"\n{}\n"):
        (tmp_path / "held").write_bytes(bad)
        with caplog.at_level(logging.ERROR, "coloc.cgroups"):
            nxt = _writer(v1, tmp_path / "held")
        assert nxt.journal.held == {} and "unusable" in caplog.text
        caplog.clear()
    assert _limit(v1) == 512 * MI


def test_the_holdings_of_cgroups_gone_are_dropped_as_the_journal_grows(v1: RealRoot, tmp_path: Path) -> None:
    """Pods end without the writer being told: the journal follows the node, not its history."""
    journal = Journal(tmp_path / "held", "boot-1")
    w = CgroupWriter(v1.hierarchy, v1.name, journal=journal, prune_at=4)
    for n in range(12):  # BE pods come and go, each limited while it lives
        rel = v1.mkcg(f"be/pod{n}")
        with w.held_by(EXACT):
            w.set_memory_limit(rel, 64 * MI)
        if n < 11:
            for d in v1.path("memory", rel), v1.path("cpu", rel):
                d.rmdir()
    held = {cg for _, cg in journal.held}
    assert "be/pod11" in held and len(held) <= 5, held


def test_the_journal_grows_by_a_line_a_change_and_is_rewritten_when_the_log_outgrows_it(
        tmp_path: Path) -> None:
    """A first pass over many pods appends a line a holding (not the whole file each time: quadratic, 12.6 s
    for 3,000 holdings measured before), and the log is compacted once it is much longer than what it holds.
    Another root's journal gives nothing back, as another boot's."""
    journal = Journal(tmp_path / "held", "boot-1", scope="/sys/fs/cgroup:kubepods")
    for n in range(3000):
        journal.hold(Holding("cpu_quota", f"besteffort/pod{n}", "test_exact", [None, 100_000],
                             ([50_000, 100_000],)))
    assert journal.stats.writes == 3000
    assert (tmp_path / "held").read_bytes().count(b"\n") == 3001
    journal.drop([("cpu_quota", f"besteffort/pod{n}") for n in range(2990)])
    for n in range(20):  # the log now holds 3,000 lines for 10 holdings: the next change rewrites it
        journal.hold(Holding("cpu_quota", "besteffort/pod0", "test_exact", [None, 100_000],
                             ([n + 1000, 100_000],)))
    assert (tmp_path / "held").read_bytes().count(b"\n") < 100
    again = Journal(tmp_path / "held", "boot-1", scope="/sys/fs/cgroup:kubepods")
    again.load()
    assert again.held == journal.held and len(again.held) == 11
    elsewhere = Journal(tmp_path / "held", "boot-1", scope="/sys/fs/cgroup:other")
    elsewhere.load()
    assert elsewhere.held == {}


def test_a_v1_cpuset_is_given_back_with_its_subtree_and_never_narrows_a_spared_cgroup(
        real_root: RealRoot, tmp_path: Path) -> None:
    """BE CPU suppression on v1 narrows the tier and its subtree; a pod made meanwhile starts narrowed (the
    kernel copies its parent's set: never journaled), and a protected pod below the tier is spared (widened
    back). A run with suppression off widens the whole subtree and narrows nothing (review, confirmed before:
    the new pod stayed narrowed, the protected pod was narrowed again)."""
    if not real_root.hierarchy.is_v1("cpuset"):
        pytest.skip("v1 cpuset")
    from agent.executors.be_knobs import BE_CPU

    full = sorted(os.sched_getaffinity(0))
    if len(full) < 2:
        pytest.skip("needs two CPUs")
    real_root.mkcg("be/pod1")
    w = _writer(real_root, tmp_path / "held")
    with w.held_by(BE_CPU):
        w.set_cpuset("be", [full[0]], descendants=True)
    real_root.mkcg("be/pod2")  # made while narrowed: starts on the tier's one CPU
    real_root.mkcg("be/protected")  # a protected pod appears: split (be_knobs.py), the tier keeps every CPU
    with w.held_by(BE_CPU):
        w.set_cpuset("be", full)
        w.set_cpuset("be/protected", full, descendants=True)  # spared
        for member in ("be/pod1", "be/pod2"):
            w.set_cpuset(member, [full[0]], descendants=True)

    def cpus(rel: str) -> str:
        return (real_root.path("cpuset", rel) / "cpuset.cpus").read_text().strip()

    assert cpus("be/pod2") == str(full[0]) and cpus("be/protected") == f"{full[0]}-{full[-1]}"
    nxt = _writer(real_root, tmp_path / "held")  # killed; the next run does not suppress
    assert nxt.settle(BE_CPU) >= 1
    assert {rel: cpus(rel) for rel in ("be", "be/pod1", "be/pod2", "be/protected")} == dict.fromkeys(
        ("be", "be/pod1", "be/pod2", "be/protected"), f"{full[0]}-{full[-1]}")


def test_cpu_idle_and_the_weight_it_kept_come_back_after_two_kills(real_root: RealRoot,
                                                                    tmp_path: Path) -> None:
    """Idle since an earlier run: this run's idle claims the weight too, and leaving idle puts back the
    weight journaled before it (review, confirmed before: the tier ended at the kernel's 1024)."""
    if not real_root.hierarchy.is_v1("cpu") or not (real_root.path("cpu", "") / "cpu.idle").exists():
        pytest.skip("v1 cpu with cpu.idle")
    from agent.executors.be_knobs import BE_CPU

    real_root.mkcg("be")
    shares = real_root.path("cpu", "be") / "cpu.shares"
    shares.write_text("2")
    first = _writer(real_root, tmp_path / "held")
    with first.held_by(BE_CPU):
        first.set_cpu_idle("be", True, keep_weight=True)
    second = _writer(real_root, tmp_path / "held")  # killed; the next run suppresses too
    with second.held_by(BE_CPU):
        second.set_cpu_idle("be", True, keep_weight=True)
    assert second.settle(BE_CPU) == 0
    third = _writer(real_root, tmp_path / "held")  # killed again; suppression off now
    third.settle(BE_CPU)
    assert (real_root.path("cpu", "be") / "cpu.idle").read_text().strip() == "0"
    assert shares.read_text().strip() == "2"
    assert third.journal.held == {}
