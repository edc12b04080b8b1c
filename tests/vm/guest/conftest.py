"""Fixtures of the guest suite (collected only inside the guest: tests/vm/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from systemdkit import SystemdPods


@pytest.fixture
def systemd_pods() -> Iterator[SystemdPods]:
    """Pods laid out by systemd (systemdkit.py); the test fails if anything is left below kubepods.slice."""
    node = SystemdPods()
    try:
        yield node
    finally:
        node.cleanup()
    left = node.leftovers()
    if left:
        pytest.fail(f"left below kubepods.slice after every unit was stopped: {', '.join(left)}")
