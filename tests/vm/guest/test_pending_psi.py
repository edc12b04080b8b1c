"""Defects the guest found in code another change owns (agent/config, agent/daemon/psi_wake.py), kept out of
the guest selection until they are fixed: `bash scripts/vm-test tests/vm/guest/test_pending_psi.py`."""

from __future__ import annotations

import pytest
from realcg import RealRoot

from agent.config.agent import LoopConfig
from agent.config.load import ConfigError
from agent.daemon.psi_wake import probe

pytestmark = [pytest.mark.guest, pytest.mark.cgroups]

UNDER_MINIMUM = "some 20000 400000"  # a 400 ms window: the kernel's minimum is 500 ms, for root too


def test_a_window_the_kernel_never_takes_is_refused_by_the_config() -> None:
    """loop.psi_trigger accepts windows down to 1 µs; the kernel refuses any under 500 ms, so such a config
    quietly turns the PSI-trigger fast path into polling on every node."""
    with pytest.raises(ConfigError, match="psi_trigger"):
        LoopConfig(psi_trigger=UNDER_MINIMUM)


def test_the_refusal_does_not_blame_a_capability_root_has(real_root: RealRoot) -> None:
    """As root (with CAP_SYS_RESOURCE) the reason shown in `status` still says the window needs it."""
    why = probe(str(real_root.path("unified") / "cpu.pressure"), UNDER_MINIMUM)
    assert why and "CAP_SYS_RESOURCE" not in why, why
