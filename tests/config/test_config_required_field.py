"""A section missing a field it requires is refused naming that field by its dotted path (it was Python's
own `__init__() missing 1 required positional argument` text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.agent import load_config
from agent.config.load import ConfigError


def test_a_missing_required_field_is_named_by_its_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("standalone: {workloads: [{cgroup: a}, {milli_cpu: 100}]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert msg.endswith("standalone.workloads[1].cgroup: required"), msg
    assert "positional argument" not in msg and "__init__" not in msg, msg
