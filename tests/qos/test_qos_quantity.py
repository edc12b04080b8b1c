"""Kubernetes quantities as apimachinery's `resource.Quantity` reads them: every decimal suffix it accepts
(n u m "" k M G T P E), the binary ones (Ki … Ei) and decimal exponents, exactly, without floats."""

from __future__ import annotations

from fractions import Fraction

import pytest

from qos.quantity import QuantityError, parse_quantity, to_int, to_milli


@pytest.mark.parametrize(("text", "value"), [
    ("1n", Fraction(1, 10**9)),
    ("250n", Fraction(250, 10**9)),
    ("1u", Fraction(1, 10**6)),
    ("500u", Fraction(500, 10**6)),
    ("1.5u", Fraction(15, 10**7)),
    ("-3n", Fraction(-3, 10**9)),
    ("250m", Fraction(1, 4)),
    ("2", Fraction(2)),
    ("2k", Fraction(2000)),
    ("1Ei", Fraction(2**60)),
    ("1E", Fraction(10**18)),
    ("1E3", Fraction(1000)),
    ("5e-3", Fraction(5, 1000)),
])
def test_every_suffix_kubernetes_accepts_is_read_exactly(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_nano_and_micro_cores_round_up_to_a_milli_core_as_kubernetes_does() -> None:
    """The kubelet reports CPU usage in nano-cores (`usageNanoCores` as `…n` in the summary API)."""
    assert to_milli("250000000n") == 250
    assert to_milli("250000001n") == 251
    assert to_milli("1500u") == 2
    assert to_int("1u") == 1


@pytest.mark.parametrize("text", ["1N", "1U", "1µ", "1nn", "1un", "n", "1 n", "1Ki2", "1i"])
def test_what_kubernetes_refuses_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
