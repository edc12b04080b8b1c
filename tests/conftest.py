"""Shared fixtures. `real_root` gives a private, real cgroup hierarchy (see tests/realcg.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kit.realcg import CgroupsUnavailable, RealRoot, leftover_dirs, required


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
    try:
        root = RealRoot()
    except CgroupsUnavailable as e:
        if required():
            pytest.fail(f"COLOC_REQUIRE_CGROUPS=1 but real cgroups are unavailable: {e}")
        pytest.skip(f"real cgroups unavailable: {e}")
    try:
        yield root
    finally:
        root.cleanup()
