"""`coloc-agent config check FILE` and `coloc-agent config show [--config FILE]`: a config file as the agent
reads it, without starting anything.

`check` validates: `ok: N sections, M keys set` (exit 0), or the loader's one-line error (exit 2).
`show` prints every key's effective value and where it came from: `default` (the file does not set it) or
`yaml` (it does). The policy settings the node's Koordinator NodeSLO can replace at run time say so; the
settings a running agent has in force come over its API (`coloc-agent status`). docs/config.md describes
every key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from agent.config import reference
from agent.config.agent import AgentConfig, LoadedConfig, read_config
from agent.config.load import ConfigError
from agent.config.provenance import DEFAULT, YAML
from agent.sources.nodeslo_map import FIELDS

# Keys the NodeSLO can replace, with the NodeSLO field that does.
NODESLO_KEYS: dict[str, str] = {f"policies.{section}.{name}": f"resourceUsedThresholdWithBE.{field}"
                                for field, section, name in FIELDS}
NODESLO_PREFIXES = (("resource_qos.memory_qos.", "resourceQOSStrategy"),
                    ("resource_qos.cpu_burst.", "cpuBurstStrategy"))


@dataclasses.dataclass(frozen=True)
class Row:
    """One key of `config show`: its value in the file's view, its source and the NodeSLO field over it."""

    key: str
    value: object
    source: str
    nodeslo: str  # the NodeSLO field that can replace it at run time, or ""


def nodeslo_field(key: str) -> str:
    """The NodeSLO field that can replace config key `key` at run time, or ""."""
    if key in NODESLO_KEYS:
        return NODESLO_KEYS[key]
    return next((field for prefix, field in NODESLO_PREFIXES if key.startswith(prefix)), "")


def _value(cfg: AgentConfig, key: str) -> object:
    obj: object = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def rows(loaded: LoadedConfig | None) -> list[Row]:
    """Every key (a list of sections as one key) with its effective value and source."""
    cfg = loaded.config if loaded is not None else AgentConfig()
    given = loaded.keys if loaded is not None else frozenset()
    return [Row(k.path, _value(cfg, k.path), YAML if k.path in given else DEFAULT, nodeslo_field(k.path))
            for k in reference.config_keys() if reference.ITEM not in k.path]


def _plain(value: object) -> object:
    """A value as JSON holds it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def render(loaded: LoadedConfig | None, path: str | None) -> str:
    """The text `config show` prints: two head lines, then one line per key: the key, its source, its value
    and, for a setting a NodeSLO can replace, the NodeSLO field that does."""
    table = rows(loaded)
    width = max(len(r.key) for r in table) + 2
    nodeslo_on = loaded is not None and loaded.config.sources.nodeslo.enabled
    set_ = sum(r.source == YAML for r in table)
    head = [f"# {path}: {set_} keys set by the file, {len(table) - set_} at their default" if path
            else "# no config file: every key at its default",
            "# (NodeSLO: field): the node's NodeSLO replaces the setting where it gives it (sources.nodeslo "
            + ("is on; `coloc-agent status` shows the settings in force)" if nodeslo_on
               else "is off here: the value shown is in force)")]
    lines = []
    for r in table:
        value = reference.yaml_value(r.value)
        if r.key.endswith("_mode") and isinstance(r.value, int):
            value = f"0{r.value:o}"
        note = f"   (NodeSLO: {r.nodeslo})" if r.nodeslo else ""
        lines.append(f"{r.key:<{width}}{r.source:<9}{value}{note}")
    return "\n".join(head + lines) + "\n"


def _load(path: str, command: str) -> LoadedConfig | None:
    try:
        return read_config(path)
    except ConfigError as err:
        print(f"coloc-agent config {command}: {err}", file=sys.stderr)
        return None


def check(path: str) -> int:
    loaded = _load(path, "check")
    if loaded is None:
        return 2
    print(f"ok: {len(loaded.sections)} sections, {len(loaded.keys)} keys set")
    return 0


def show(path: str | None, as_json: bool) -> int:
    loaded = None
    if path is not None:
        loaded = _load(path, "show")
        if loaded is None:
            return 2
    if as_json:
        doc = [{"key": r.key, "value": _plain(r.value), "source": r.source,
                **({"nodeslo": r.nodeslo} if r.nodeslo else {})} for r in rows(loaded)]
        print(json.dumps(doc, indent=1))
    else:
        sys.stdout.write(render(loaded, path))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coloc-agent config", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="{check,show}")
    c = sub.add_parser("check", help="validate a config file: exit 0, or 2 with the error",
                       description="Validate a config file without starting anything: "
                                   "'ok: N sections, M keys set' (exit 0) or the first error (exit 2).")
    c.add_argument("file", metavar="FILE", help="the YAML config file")
    s = sub.add_parser("show", help="every key's effective value and where it came from",
                       description="Every config key's effective value and its source (default, yaml); "
                                   "the policy settings a NodeSLO can replace say so.")
    s.add_argument("--config", metavar="FILE", help="the YAML config file (none: every default)")
    s.add_argument("--json", action="store_true", help="print a JSON list of {key, value, source, nodeslo}")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    if args.command == "check":
        return check(args.file)
    return show(args.config, args.json)
