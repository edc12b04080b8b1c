"""`loop:` settings of the fast path (issue 17): bad values are refused with the setting's name."""

from __future__ import annotations

import pytest

from agent.config.agent import LoopConfig
from agent.config.load import ConfigError


def test_defaults_try_a_half_second_psi_trigger_and_poll_at_2_hz_when_calm() -> None:
    cfg = LoopConfig()
    assert cfg.psi_trigger == "some 20000 500000"
    assert cfg.calm_poll_s == 0.5 and cfg.fast_poll_s == 0.05 and cfg.fast_hold_s == 3.0


@pytest.mark.parametrize("spec", ["some 20000", "any 20000 500000", "some 0 500000", "some 600000 500000",
                                  "full 20000 20000000", "some 2e4 500000", "some -1 500000",
                                  "full 1000 10000", "some 20000 400000"])
def test_a_malformed_or_out_of_range_psi_trigger_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"loop\.psi_trigger"):
        LoopConfig(psi_trigger=spec)


@pytest.mark.parametrize("spec", ["", "some 20000 2000000", "full 1000 500000", "some 10000000 10000000"])
def test_valid_psi_triggers_or_none_are_taken(spec: str) -> None:
    assert LoopConfig(psi_trigger=spec).psi_trigger == spec


@pytest.mark.parametrize(("field", "value"), [("calm_poll_s", 0.01), ("calm_poll_s", 61.0),
                                              ("fast_hold_s", -1.0), ("psi_max_cgroups", 0),
                                              ("psi_max_cgroups", 5000)])
def test_poll_and_trigger_limits_are_checked(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"loop\.{field}"):
        LoopConfig(**{field: value})
