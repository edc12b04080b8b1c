"""Settings for a replay other than the recorded ones: `KEY=VALUE` pairs on the config's keys, or a config
file.

The keys are the config file's (docs/config.md) that a tick's decision depends on: `policies.*`, `batch.*`,
`io.policy.*`, `network.policy.*`, and `eviction.dry_run`, `eviction.rate_per_minute`, `eviction.burst`,
`eviction.recheck_cooldown_s`. A value is read as YAML and must have the key's type; the section validates
it as the config file's loader does. Anything else is a one-line error naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import yaml

from agent.config.agent import load_config
from agent.trace.codec import TraceError
from agent.trace.params import EvictionGuards, TickSettings, tick_settings

_GUARDS = {"eviction.dry_run": "dry_run", "eviction.rate_per_minute": "rate_per_s", "eviction.burst": "burst",
           "eviction.recheck_cooldown_s": "cooldown_s"}
_ROOTS = (("policies.", "policies"), ("batch.", "batch"), ("io.policy.", "io"),
          ("network.policy.", "network"))


def parse_pair(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise TraceError(f"--set {text!r}: expected KEY=VALUE")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise TraceError(f"--set {key}: {raw!r} is not a value") from None
    return key.strip(), value


def _typed(key: str, current: object, value: object) -> object:
    if isinstance(current, bool) or isinstance(value, bool):
        if not (isinstance(current, bool) and isinstance(value, bool)):
            raise TraceError(f"--set {key}: expected {type(current).__name__}, got {value!r}")
        return value
    if isinstance(current, float) and isinstance(value, int):
        return float(value)
    if current is None or isinstance(value, type(current)):
        return value
    raise TraceError(f"--set {key}: expected {type(current).__name__}, got {value!r}")


def _set_in(obj: Any, path: list[str], key: str, value: object) -> Any:
    """`obj` (a dataclass) with the field at `path` set to `value`, validated by each section."""
    name = path[0]
    if isinstance(obj, type) or not dataclasses.is_dataclass(obj) \
            or name not in {f.name for f in dataclasses.fields(obj)}:
        raise TraceError(f"--set {key}: no such setting")
    current = getattr(obj, name)
    new = _set_in(current, path[1:], key, value) if len(path) > 1 else _typed(key, current, value)
    changed: dict[str, Any] = {name: new}
    section: Any = obj  # a dataclass instance (checked above)
    try:
        return dataclasses.replace(section, **changed)
    except ValueError as err:
        raise TraceError(f"--set {key}: {err}") from None


def value_of(settings: TickSettings, key: str) -> object:
    """The value of config key `key` in `settings` (None where it has none)."""
    if key in _GUARDS:
        v = getattr(settings.guards, _GUARDS[key])
        return v * 60 if key == "eviction.rate_per_minute" else v
    for prefix, field in _ROOTS:
        if key.startswith(prefix):
            obj: Any = getattr(settings, field)
            for part in key[len(prefix):].split("."):
                obj = getattr(obj, part, None)
            return obj
    return None


def apply(settings: TickSettings, pairs: Sequence[tuple[str, Any]]) -> TickSettings:
    for key, value in pairs:
        settings = _apply_one(settings, key, value)
    return settings


def _apply_one(settings: TickSettings, key: str, value: object) -> TickSettings:
    if key in _GUARDS:
        name = _GUARDS[key]
        current = value_of(settings, key)
        typed = _typed(key, current, value)
        if name == "rate_per_s" and isinstance(typed, float):
            typed = typed / 60.0
        if name in ("rate_per_s", "burst") and isinstance(typed, int | float) and typed <= 0:
            raise TraceError(f"--set {key}: must be > 0, got {value!r}")
        changed: dict[str, Any] = {name: typed}
        return dataclasses.replace(settings, guards=dataclasses.replace(settings.guards, **changed))
    for prefix, field in _ROOTS:
        if key.startswith(prefix):
            section = getattr(settings, field)
            if section is None:
                raise TraceError(f"--set {key}: the trace was recorded with {prefix.rstrip('.')} off")
            new = _set_in(section, key[len(prefix):].split("."), key, value)
            return dataclasses.replace(settings, **{field: new})
    raise TraceError(f"--set {key}: not a setting a replay can change (policies.*, batch.*, io.policy.*, "
                     f"network.policy.*, eviction.*)")


def from_config(path: str) -> Any:
    """The replay's settings from a config file: a function of the recorded ones (whether the disk guard
    ran is the recording's)."""
    try:
        cfg = load_config(path)
    except ValueError as err:
        raise TraceError(str(err)) from None

    def settings(recorded: TickSettings) -> TickSettings:
        return tick_settings(cfg, cfg.policies, recorded.io is not None)
    return settings


__all__ = ["EvictionGuards", "apply", "from_config", "parse_pair", "value_of"]
