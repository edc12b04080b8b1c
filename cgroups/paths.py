"""Lexical and physical checks that keep every cgroup path inside its root."""

from __future__ import annotations

import os

from cgroups.errors import PathOutsideRoot


def check_rel(rel: str, what: str = "cgroup path") -> str:
    """Return `rel` normalised ("a/b", "" for the root itself) or raise PathOutsideRoot.

    Refused: absolute paths, `.`/`..` components, empty components in the middle, NUL bytes.
    """
    if not isinstance(rel, str):
        raise PathOutsideRoot(f"{what} must be a string, got {type(rel).__name__}: {rel!r}")
    if "\x00" in rel:
        raise PathOutsideRoot(f"{what} {rel!r} contains a NUL byte", rel)
    if rel.startswith("/"):
        raise PathOutsideRoot(f"{what} {rel!r} is absolute; it must be relative to the cgroup root", rel)
    stripped = rel.rstrip("/")
    if not stripped:
        return ""
    parts = stripped.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise PathOutsideRoot(f"{what} {rel!r} has a {part or 'empty'!r} component; refused", rel)
    return stripped


def depth(rel: str) -> int:
    """Number of components below the root ("" is 0)."""
    return 0 if not rel else rel.count("/") + 1


def join(base: str, rel: str) -> str:
    """`base/rel` for an already checked rel ("" gives base)."""
    return base if not rel else f"{base}/{rel}"


def ensure_inside(path: str, root_real: str) -> None:
    """Raise PathOutsideRoot unless `path`, with every symlink resolved, is `root_real` or below it."""
    real = os.path.realpath(path)
    if real != root_real and not real.startswith(root_real + os.sep):
        raise PathOutsideRoot(f"{path} resolves to {real}, outside the cgroup root {root_real}", path)
