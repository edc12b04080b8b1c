"""The root marker: only the very root it names — same mount, same name, same boot, same directory — counts
as the agent's; a marker written before the root was made, or an unusable one, claims nothing."""

from __future__ import annotations

from pathlib import Path

from agent.state.owned_root import RootMarker

BOOT = "6f1c2d3e-0000-4000-8000-000000000001"
INODE = 4242


def _marker(tmp_path: Path, root: str = "coloc", mount: str = "/sys/fs/cgroup",
            boot: str = BOOT) -> RootMarker:
    return RootMarker(tmp_path / "state.json", mount, root, boot)


def test_a_made_root_is_claimed_until_cleared(tmp_path: Path) -> None:
    m = _marker(tmp_path, "coloc/agent/")
    assert not m.claims(INODE)
    m.record(INODE)
    assert m.path == tmp_path / "state.json.root"
    assert m.claims(INODE) and _marker(tmp_path, "/coloc/agent").claims(INODE)
    m.clear()
    assert not m.claims(INODE) and not m.path.exists()
    m.clear()  # twice: nothing to do


def test_a_marker_written_before_the_root_was_made_claims_nothing(tmp_path: Path) -> None:
    """A crash between `record()` and the mkdir, or someone else making the root meanwhile: leave it."""
    m = _marker(tmp_path)
    m.record()
    assert not m.claims(INODE)


def test_another_root_mount_boot_or_directory_is_not_claimed(tmp_path: Path) -> None:
    _marker(tmp_path).record(INODE)
    assert not _marker(tmp_path, "kubepods").claims(INODE)
    assert not _marker(tmp_path, mount="/mnt/cgroup").claims(INODE)
    # After a reboot the cgroup is gone; a directory of the same name made since is someone else's.
    assert not _marker(tmp_path, boot="6f1c2d3e-0000-4000-8000-000000000002").claims(INODE)
    # Same boot, but the root was removed and made again by someone else: another inode.
    assert not _marker(tmp_path).claims(INODE + 1)
    assert not _marker(tmp_path).claims(None)  # the root's inode cannot be read
    assert not _marker(tmp_path, boot="").claims(INODE)  # no boot id to compare: never claim


def test_an_unusable_marker_is_not_claimed(tmp_path: Path) -> None:
    m = _marker(tmp_path)
    for junk in (b"", b"{not json", b"\xff\xfe", b'"coloc"', b"[]"):
        m.path.write_bytes(junk)
        assert not m.claims(INODE)
