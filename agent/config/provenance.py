"""Where each config value came from: the file (`yaml`) or the declaration (`default`).

The loader knows which keys a file sets (`file_keys`, `read_config`); the runtime hands them to the settings
in force, so `status` says `default` for a policy setting nobody set, `yaml` for one the file set and
`NodeSLO` for one the node's NodeSLO gives (agent/sources/nodeslo_map.py).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Union, get_args, get_origin, get_type_hints

DEFAULT, YAML = "default", "yaml"


def _section_type(tp: object) -> type | None:
    """The dataclass a field of type `tp` holds (`X` or `X | None`), else None."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else None
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def file_keys(data: object, cls: type, prefix: str = "") -> frozenset[str]:
    """The dotted keys a YAML document `data` sets in config section `cls`: its leaves, not the sections
    around them (a list of sections, `standalone.workloads`, is one key). Keys `cls` does not have are
    left out (the loader refuses them)."""
    if not isinstance(data, Mapping):
        return frozenset()
    hints = get_type_hints(cls)
    out: set[str] = set()
    for name, value in data.items():
        if name not in hints:
            continue
        path = f"{prefix}.{name}" if prefix else str(name)
        section = _section_type(hints[name])
        if section is not None and (value is None or isinstance(value, Mapping)):
            out |= file_keys(value, section, path)
        else:
            out.add(path)
    return frozenset(out)
