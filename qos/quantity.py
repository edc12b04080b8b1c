"""Kubernetes resource quantities (`250m`, `2`, `4Gi`, `1e3`, `2k`) parsed exactly, without floats.

Grammar (apimachinery `resource.Quantity`): a signed decimal number followed by a binary suffix
(Ki Mi Gi Ti Pi Ei), a decimal suffix (n, u, m, k, M, G, T, P, E, or none) or a decimal exponent (e3, E-2).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"^({_NUMBER})(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{{1,3}})?$")
_SUFFIX = {
    None: Fraction(1),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
MAX_TEXT = 64


class QuantityError(ValueError):
    """A quantity string is not in the Kubernetes format."""


def parse_quantity(value: object) -> Fraction:
    """Exact value of a quantity given as a string (or an int, as some JSON writers emit)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    return _parse_text(value)


@lru_cache(maxsize=1024)
def _parse_text(value: str) -> Fraction:
    """A pod list repeats a few quantity strings many times ("500", "256Mi"): each is parsed once."""
    if len(value) > MAX_TEXT:
        raise QuantityError(f"quantity too long ({len(value)} characters)")
    m = _QUANTITY.match(value.strip())
    if m is None:
        raise QuantityError(f"not a quantity: {value!r}")
    number, suffix = m.group(1), m.group(2)
    if suffix in _SUFFIX:  # before the exponent case: "Ei" and "E" are suffixes, "E3" is an exponent
        return Fraction(number) * _SUFFIX[suffix]
    return Fraction(number) * Fraction(10) ** int(suffix[1:])


def ceil_int(q: Fraction) -> int:
    """Round up to a whole unit, as Kubernetes does for `Value()`."""
    return -((-q.numerator) // q.denominator)


def to_milli(value: object) -> int:
    """A CPU quantity (`250m`, `1.5`) in milli-cores, rounded up."""
    return ceil_int(parse_quantity(value) * 1000)


def to_int(value: object) -> int:
    """A quantity as a whole number (bytes, or the raw count of an extended resource), rounded up."""
    return ceil_int(parse_quantity(value))
