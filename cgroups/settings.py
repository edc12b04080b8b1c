"""What a writer can be asked to set: one frozen value per knob, validated on construction.

Bad values raise InvalidValue (a ValueError) before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from cgroups.errors import InvalidValue


@dataclass(frozen=True, slots=True)
class CpuQuota:
    """CFS bandwidth: `quota_us` per `period_us`; None lifts the cap."""

    rel: str
    quota_us: int | None
    period_us: int = 100_000

    def __post_init__(self) -> None:
        if not 1000 <= self.period_us <= 1_000_000:
            raise InvalidValue(f"cpu period must be 1000..1000000 µs, got {self.period_us}")
        if self.quota_us is not None and self.quota_us < 1000:
            raise InvalidValue(f"cpu quota must be >= 1000 µs or None, got {self.quota_us}")


@dataclass(frozen=True, slots=True)
class CpuShares:
    """v1 cpu.shares; on v2 written as cpu.weight = 1 + (shares − 2) × 9999 / 262142."""

    rel: str
    shares: int

    def __post_init__(self) -> None:
        if not 2 <= self.shares <= 262_144:
            raise InvalidValue(f"cpu shares must be 2..262144, got {self.shares}")


@dataclass(frozen=True, slots=True)
class Cpuset:
    rel: str
    cpus: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.cpus or any(c < 0 for c in self.cpus):
            raise InvalidValue(f"cpuset must name at least one cpu >= 0, got {self.cpus}")


@dataclass(frozen=True, slots=True)
class CpuIdle:
    rel: str
    idle: bool


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """Hard limit (v1 memory.limit_in_bytes, v2 memory.max); None = unlimited."""

    rel: str
    bytes: int | None

    def __post_init__(self) -> None:
        if self.bytes is not None and self.bytes < 0:
            raise InvalidValue(f"memory limit must be >= 0 or None, got {self.bytes}")


@dataclass(frozen=True, slots=True)
class MemoryHigh:
    """Throttle point (v2 memory.high; v1 falls back to memory.soft_limit_in_bytes); None = none."""

    rel: str
    bytes: int | None

    def __post_init__(self) -> None:
        if self.bytes is not None and self.bytes < 0:
            raise InvalidValue(f"memory high must be >= 0 or None, got {self.bytes}")


Setting = CpuQuota | CpuShares | Cpuset | CpuIdle | MemoryLimit | MemoryHigh


def shares_to_weight(shares: int) -> int:
    return 1 + (shares - 2) * 9999 // 262_142
