"""The journal of holdings (`cgroups/holdings.py`) through the one writer, on real v1 cgroups: written before
a knob changes owner and never at a steady write; a run killed between the journal and the knob leaves
nothing the next run cannot give back; another boot's or a damaged journal gives nothing back."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
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
    held = {(h["knob"], h["cgroup"]): h for h in json.loads((tmp_path / "held").read_text())["held"]}
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
    outside = {"format": "coloc-agent/holdings/v1", "boot_id": "boot-1", "marks": {},
               "held": [{"knob": "cpu_quota", "cgroup": "../../etc", "holder": "x", "give_back": 1,
                         "ours": None}]}
    for bad in (b"{", b'{"format": "x"}', json.dumps(outside).encode()):
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
