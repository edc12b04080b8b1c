"""The config's byte sizes are Kubernetes quantities (`qos.quantity`), the same grammar the pod list uses.

Before issue 12 the config had a parser of its own; these are the inputs on which the two disagreed, each
now read as Kubernetes reads it (or refused with the field named, where Kubernetes would read a typo).
"""

from __future__ import annotations

import pytest

from agent.config.load import ConfigError, parse_bytes
from qos.quantity import to_int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1k", 1000),  # was refused: the config knew only upper-case K
        ("1e3", 1000),  # decimal exponents were refused
        ("1E3", 1000),
        ("1Pi", 1 << 50),  # Pi, Ei, P, E were refused
        ("1P", 10**15),
        ("1.Gi", 1 << 30),  # "1." and ".5" are Kubernetes numbers
        (".5Gi", 1 << 29),
        ("0.1Ki", 103),  # was 102: a fraction of a byte now rounds up, as Kubernetes' Value() does
        ("1.1Ti", 1209462790554),  # was 1209462790553 (float rounding)
        ("3.3333Mi", 3495219),  # was 3495218
        ("9007199254740993", 9007199254740993),  # was 9007199254740992: beyond a float's exact integers
    ],
)
def test_config_reads_what_kubernetes_reads(text: str, expected: int) -> None:
    assert parse_bytes(text, "node.memory") == expected == to_int(text)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("1K", "write k (1000) or Ki (1024)"),  # was 1000; Kubernetes refuses "K"
        ("2 Gi", "expected a byte quantity"),  # was 2 GiB; Kubernetes refuses the space
        (-5, "may not be negative"),  # was -5
        ("-1Gi", "may not be negative"),
        ("1000000m", "did you mean Mi"),  # Kubernetes reads 1000 bytes; in a config it is a typo of Mi
        (1.5, "expected a byte quantity"),
    ],
)
def test_config_refuses_with_the_field_named(value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^node\.memory: ") as err:
        parse_bytes(value, "node.memory")
    assert says in str(err.value)


@pytest.mark.parametrize("text", ["2Gi", "512Mi", "1G", "1.5Gi", " 2Gi ", "1073741824"])
def test_where_they_always_agreed_nothing_changed(text: str) -> None:
    assert parse_bytes(text, "x") == to_int(text)
