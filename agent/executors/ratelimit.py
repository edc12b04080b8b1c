"""A token bucket for evictions: at most `burst` at once, refilled at `rate_per_s`."""

from __future__ import annotations


class TokenBucket:
    """Time is passed in, so the bucket is deterministic and testable."""

    def __init__(self, rate_per_s: float, burst: int, now: float) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst ≥ 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
            self._at = now

    def available(self, now: float) -> float:
        self._refill(now)
        return self._tokens

    def take(self, now: float) -> bool:
        """Take one token if there is one."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
