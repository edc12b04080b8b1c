"""The root marker: only the very root (and mount) it names counts as the agent's; unusable ones do not."""

from __future__ import annotations

from pathlib import Path

from agent.state.owned_root import RootMarker


def test_a_recorded_root_is_claimed_until_cleared(tmp_path: Path) -> None:
    m = RootMarker(tmp_path / "state.json", "/sys/fs/cgroup", "coloc/agent/")
    assert not m.claims()
    m.record()
    assert m.path == tmp_path / "state.json.root"
    assert m.claims() and RootMarker(tmp_path / "state.json", "/sys/fs/cgroup", "/coloc/agent").claims()
    m.clear()
    assert not m.claims() and not m.path.exists()
    m.clear()  # twice: nothing to do


def test_another_root_or_mount_is_not_claimed(tmp_path: Path) -> None:
    RootMarker(tmp_path / "state.json", "/sys/fs/cgroup", "coloc").record()
    assert not RootMarker(tmp_path / "state.json", "/sys/fs/cgroup", "kubepods").claims()
    assert not RootMarker(tmp_path / "state.json", "/mnt/cgroup", "coloc").claims()


def test_an_unusable_marker_is_not_claimed(tmp_path: Path) -> None:
    m = RootMarker(tmp_path / "state.json", "/sys/fs/cgroup", "coloc")
    for junk in (b"", b"{not json", b"\xff\xfe", b'"coloc"', b"[]"):
        m.path.write_bytes(junk)
        assert not m.claims()
