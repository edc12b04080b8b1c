"""The configuration reference, read from the one declaration: the config dataclasses themselves.

`config_keys()` walks `AgentConfig` (nested sections, lists of sections, optional fields) and gives every
key with its dotted path, its type, its default (the default the agent really runs on: a section's own
default where its parent gives it one, as `batch.origin` and the `sources.*` switches), its range
(`qos.validation.bounded`) or its choices (a `Literal` annotation) and what it does: the field's comment in
the class body, else the sentence of the class docstring that begins with the field's name in backquotes.
`markdown()` renders `docs/config.md` from them (`scripts/gen_config_doc`; a test fails when it is stale).

The same walk gives `coloc-agent config show` its rows.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import re
import textwrap
import tokenize
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from agent.config.agent import AgentConfig
from qos.validation import BOUNDS, Bounds, choices_of

__all__ = ["Key", "Section", "config_keys", "describe", "markdown", "sections", "yaml_value"]

ITEM = "[]"  # a list of sections: its items' keys are `path[].name`


@dataclass(frozen=True)
class Key:
    """One config key: where it is, what it takes, what it is when nobody sets it, and what it does."""

    path: str
    type: str
    default: str
    allowed: str  # "[0, 100]", "(0, 4096]", "cpuset, cfsQuota" or ""
    doc: str
    required: bool = False


@dataclass(frozen=True)
class Section:
    """A config section (a dataclass): its dotted path and the first sentence of its docstring."""

    path: str
    doc: str
    cls: type


def _is_section(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _optional(tp: object) -> tuple[object, bool]:
    """`tp` without `| None`, and whether it had it."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return tp, False


def _list_item(tp: object) -> object | None:
    """The item type of `tuple[X, ...]` / `list[X]`, else None."""
    if get_origin(tp) in (tuple, list):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return args[0] if args else Any
    return None


_SCALARS: dict[object, str] = {int: "int", float: "float", str: "string", bool: "bool"}


def type_name(tp: object) -> str:
    """A field's type as the YAML sees it: int, float, string, bool, choice, list of …, mapping, `| null`."""
    if choices_of(tp) is not None and tp is not bool:
        inner, optional = _optional(tp)
        name = "bool" if inner is bool else "choice"
        return f"{name} | null" if optional and None not in (choices_of(inner) or ()) else name
    inner, optional = _optional(tp)
    if get_origin(inner) in (Union, types.UnionType):
        name = " | ".join(type_name(a) for a in get_args(inner))
    elif (item := _list_item(inner)) is not None:
        name = f"list of {'sections' if _is_section(item) else type_name(item)}"
    elif get_origin(inner) in (dict, Mapping) or inner is dict:
        name = "mapping"
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        name = "choice"
    else:
        name = _SCALARS.get(inner, str(inner))
    return f"{name} | null" if optional else name


def yaml_value(value: object) -> str:
    """A value as one writes it in the YAML: true, null, "" for the empty string, [a, b] for a list."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return yaml_value(value.value)
    if isinstance(value, str):
        plain = value and re.fullmatch(r"[A-Za-z0-9_./:+=@-][A-Za-z0-9_./:+=@ -]*", value) and \
            value.strip() == value and value not in ("true", "false", "null", "yes", "no", "on", "off")
        return value if plain else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) >= 1e16 else f"{value:.1f}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "{" + ", ".join(f"{f.name}: {yaml_value(getattr(value, f.name))}"
                               for f in dataclasses.fields(value) if f.init) + "}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _mode(name: str, value: object) -> str | None:
    """A permission mode as one writes it (`0660`; YAML 1.1, which the loader reads, takes it as octal)."""
    if name.endswith("_mode") and isinstance(value, int) and not isinstance(value, bool):
        return f"0{value:o}"
    return None


def _allowed(f: dataclasses.Field[Any], tp: object) -> str:
    bounds = f.metadata.get(BOUNDS)
    if isinstance(bounds, Bounds):
        def end(v: int | float) -> str:
            if f.name.endswith("_mode"):
                return f"0{int(v):o}" if v else "0"
            if isinstance(v, int):
                return str(v)
            return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
        return f"{'(' if bounds.low_open else '['}{end(bounds.low)}, {end(bounds.high)}]"
    inner, _ = _optional(tp)
    choices = choices_of(tp)
    if choices is not None and choices_of(inner) != (True, False):
        return ", ".join(yaml_value(c) for c in choices)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return ", ".join(yaml_value(m.value) for m in inner)
    return ""


# -- what each field does: its comment, else its docstring's sentence ------------------------------------

def _clean(text: str) -> str:
    return " ".join(text.split())


@cache
def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class body: the comment lines just above it and the one on its line."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    by_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            by_line[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    out: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        n = node.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, by_line.get(n, ""))
            n -= 1
        trailing = by_line.get(node.end_lineno or node.lineno, "")
        if (node.end_lineno or node.lineno) != node.lineno:
            trailing = by_line.get(node.lineno, "") or trailing
        text = _clean(" ".join([*above, trailing]))
        if text.startswith(("noqa", "type:")):
            text = ""
        out[node.target.id] = text
    return out


def _docstring_sentence(cls: type, name: str) -> str:
    """The clause of `cls`'s docstring that starts with `` `name` ``: up to the next clause that starts with
    another field's name, or the end of the paragraph."""
    doc = inspect.getdoc(cls) or ""
    if f"`{name}`" not in doc:
        return ""
    text = _clean(doc.replace("\n\n", " \x00 "))
    start = re.search(rf"(?:^|(?<=[.;:]\s)|(?<=\x00\s))`{re.escape(name)}`", text)
    if start is None:
        return ""
    rest = text[start.start():]
    end = re.search(r"(?:[.;]\s+(?=`[a-z_0-9]+`[ :])|\.\s+(?=[A-Z])|\s\x00|$)", rest[len(name) + 2:])
    clause = rest[: len(name) + 2 + (end.start() if end else len(rest))].strip()
    return clause.rstrip(";").replace("\x00", "").strip()


def _first_sentence(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    if doc.startswith(f"{cls.__name__}("):  # the one dataclass makes up
        return ""
    return _clean(doc.split("\n\n", 1)[0])


def describe(cls: type, name: str) -> str:
    """What field `name` of config section `cls` does, in one line (its comment and/or docstring clause)."""
    comment = _comments(cls).get(name, "")
    sentence = _docstring_sentence(cls, name)
    sentence = re.sub(rf"^`{re.escape(name)}`:\s*", "", sentence)
    if comment and sentence:
        return f"{sentence.rstrip('.')}; {comment}" if len(comment) < 40 else comment
    return comment or sentence


# -- the walk --------------------------------------------------------------------------------------------

def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _walk(cls: type, default: object | None, prefix: str) -> Iterator[Key | Section]:
    yield Section(prefix, _first_sentence(cls), cls)
    plain = _plain_default(cls)
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        inner, _ = _optional(tp)
        if _is_section(inner):
            assert isinstance(inner, type)
            yield from _walk(inner, getattr(default, f.name, None) if default is not None else None, path)
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        value = _field_default(f, default, plain)
        shown = "" if required else (_mode(f.name, value) or yaml_value(value))
        yield Key(path, type_name(tp), shown, _allowed(f, tp), describe(cls, f.name), required)
        item = _list_item(inner)
        if item is not None and _is_section(item):
            assert isinstance(item, type)
            yield from _walk(item, None, path + ITEM)


def _plain_default(cls: type) -> object | None:
    """`cls()` when every field has a default, else None."""
    try:
        made: object = cls()
    except (TypeError, ValueError):
        return None
    return made


def _field_default(f: dataclasses.Field[Any], given: object | None, plain: object | None) -> object:
    """The field's declared default, unless the parent gives this section another default (then that)."""
    declared = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    if given is not None and plain is not None and getattr(given, f.name) != getattr(plain, f.name):
        return getattr(given, f.name)
    return declared


def _all() -> list[Key | Section]:
    return list(_walk(AgentConfig, AgentConfig(), ""))


def config_keys() -> list[Key]:
    """Every config key, in declaration order."""
    return [k for k in _all() if isinstance(k, Key)]


def sections() -> list[Section]:
    """Every config section (the top one has path "")."""
    return [s for s in _all() if isinstance(s, Section)]


# -- docs/config.md --------------------------------------------------------------------------------------

_HEAD = """\
# Configuration reference

<!-- Generated by scripts/gen_config_doc from the config dataclasses; do not edit by hand. -->

Every key of the agent's YAML config (`coloc-agent run --config FILE`), in the order the agent declares
them: its type, the value it has when the file does not set it, the range a number must lie in (`[a, b]`
both ends included, `(a, b]` the low end excluded) or the values a choice takes, and what it does. The
table is generated from the config dataclasses themselves (`agent/config/`, and `qos/` for the policy
sections), so it is what the loader checks. A wrong key, type or value is refused at start in one line
naming the key, exit 2.

- `coloc-agent config check FILE` validates a file without starting anything.
- `coloc-agent config show --config FILE` prints every key's effective value and where it came from
  (`default` or `yaml`), and marks the policy settings the node's Koordinator NodeSLO can replace at run
  time; `coloc-agent status` shows the settings a running agent has in force.
- A source under `sources:` is on when its section is in the file (`sources: {yarn: {}}` turns on the YARN
  source alone); the defaults below are those of a file that names no source: standalone mode.
- Byte sizes (`node.memory`, `standalone.workloads[].memory`) take an int or a Kubernetes quantity
  (`2Gi`, `512Mi`).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def markdown() -> str:
    """docs/config.md: one table per section, one row per key."""
    out = [_HEAD]
    rows: dict[str, list[Key]] = {}
    secs = [s for s in sections() if s.path]
    for k in config_keys():
        section = k.path.rsplit(".", 1)[0] if "." in k.path else ""
        rows.setdefault(section, []).append(k)
    count = sum(len(v) for v in rows.values())
    out.append(f"{count} keys in {len([s for s in secs if '.' not in s.path])} sections.\n")
    for s in secs:
        mine = rows.get(s.path, [])
        if not mine and "." in s.path:
            continue
        depth = "##" if "." not in s.path else "###"
        out.append(f"{depth} `{s.path}`\n")
        if s.doc:
            out.append(f"{s.doc}\n")
        if not mine:
            continue
        out.append("| key | type | default | range or choices | what it does |")
        out.append("|---|---|---|---|---|")
        for k in mine:
            default = "required" if k.required else _code(_cell(k.default))
            out.append(f"| `{k.path}` | {_cell(k.type)} | {default} | {_cell(k.allowed)} | {_cell(k.doc)} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
