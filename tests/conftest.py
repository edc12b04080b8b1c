"""Shared fixtures. `real_root` gives a private, real cgroup hierarchy (tests/kit/realcg.py); `systemd_pods`
and `own_pods` lay pods out through systemd (tests/kit/systemd.py; only in the guest); `api` is a fake
Kubernetes API server serving the checked-in Node (tests/kit/fakes/apiserver.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.fakes.apiserver import FakeApiServer
from kit.realcg import RealRoot, leftover_dirs, real_root_or_skip
from kit.systemd import SystemdPods


@pytest.fixture(autouse=True)
def _no_cgroup_left_behind() -> Iterator[None]:
    """Fail the test that leaves any of its `coloc-test-*` roots behind in any hierarchy."""
    before = len(RealRoot.made_names)
    yield
    left = leftover_dirs(RealRoot.made_names[before:])
    if left:
        pytest.fail(f"cgroups left behind: {', '.join(map(str, left))}")


@pytest.fixture
def real_root() -> Iterator[RealRoot]:
    """A private `coloc-test-<uuid>` root in every cgroup hierarchy, removed afterwards.

    Skips when cgroups cannot be created here, fails instead when COLOC_REQUIRE_CGROUPS=1.
    """
    root = real_root_or_skip()
    try:
        yield root
    finally:
        root.cleanup()


def _laid_out(kubepods: str) -> Iterator[SystemdPods]:
    node = SystemdPods(kubepods)
    try:
        yield node
    finally:
        node.cleanup()
    left = node.leftovers()
    if left:
        pytest.fail(f"left below {node.root} after every unit was stopped: {', '.join(left)}")


@pytest.fixture
def systemd_pods() -> Iterator[SystemdPods]:
    """Pods laid out by systemd below kubepods.slice; the test fails if anything is left below it."""
    yield from _laid_out("kubepods")


@pytest.fixture
def own_pods() -> Iterator[SystemdPods]:
    """The same below a kubepods slice of the test's own name (`kp<8 hex>`), apart from any other pods."""
    yield from _laid_out(f"kp{uuid.uuid4().hex[:8]}")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """A fake API server with the checked-in Node (`node-a`) and no pods it knows."""
    with FakeApiServer(Path(__file__).parent / "fixtures" / "apiserver" / "node.json", {}) as server:
        yield server
