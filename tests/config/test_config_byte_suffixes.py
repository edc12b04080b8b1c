"""A config byte size with a sub-unit suffix is a typo: Kubernetes reads `512u` as 512 millionths of a byte
(1 byte, rounded up), which nobody means; the loader refuses it naming the field, as it does `m`."""

from __future__ import annotations

import pytest

from agent.config.load import ConfigError, parse_bytes


@pytest.mark.parametrize(("text", "says"), [
    ("512u", "millionths of a byte"),
    ("2n", "billionths of a byte"),
    ("1000000m", "thousandths of a byte"),
])
def test_a_fraction_of_a_byte_suffix_is_refused_naming_the_field(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^node\.memory: ") as err:
        parse_bytes(text, "node.memory")
    assert says in str(err.value)
