"""A clock the test moves by hand, for code that takes a `clock: Callable[[], float]`."""

from __future__ import annotations


class FakeClock:
    """Monotonic seconds that change only when the test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
