"""pydantic v2 and msgspec against the agent's own config loader (docs/dependencies.md, "Config validation").

Both libraries get models generated from the agent's own declarations (every section's types, defaults and
`qos.validation.bounded` ranges; unknown keys refused; strict types), so the comparison is of the
mechanism, not of two hand-written schemas. Checks that tie two settings together stay in `__post_init__`
whichever validates the fields, so they are left out of the generated models.

    .venv/bin/python scripts/eval_config_validation.py strictness    # a table: refused? and the message
    .venv/bin/python scripts/eval_config_validation.py cost <loader>   # one JSON line: import+load s, RSS

<loader> is `handwritten`, `pydantic` or `msgspec`; `cost` imports the agent's run path first (what
`coloc-agent run` loads), then validates `examples/standalone.yaml` with that loader alone (for a library:
its import, the generated models and one validation), in a fresh interpreter per run. msgspec is not
a dependency: install it aside (`pip install --target DIR msgspec`) and put DIR on PYTHONPATH.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "standalone.yaml"

# (what is wrong, YAML) — each must be refused with the field named, except where noted.
CASES = [
    ("bool for a float", "loop: {interval_s: true}"),
    ("string for a float", "loop: {interval_s: '1'}"),
    ("float for an int", "eviction: {burst: 3.0}"),
    ("bool for an int", "eviction: {burst: true}"),
    ("int past int64", "eviction: {burst: 1000000000000000000000000000000}"),
    ("NaN", "loop: {interval_s: .nan}"),
    ("infinity", "loop: {interval_s: .inf}"),
    ("below the range", "policies: {cpu_eviction: {window_s: 0.05}}"),
    ("above the range", "sources: {kubelet: {stale_after_s: 1.0e+300}}"),
    ("unknown key", "loop: {intervall_s: 1}"),
    ("int for a bool", "eviction: {dry_run: 1}"),
    ("string for a bool", "eviction: {dry_run: 'yes'}"),
    ("not one of a Literal", "cgroups: {driver: upstart}"),
    ("int for a string", "node: {name: 5}"),
    ("string for a list", "api: {tls_client_names: abc}"),
    ("list item out of range", "standalone: {workloads: [{cgroup: w, milli_cpu: -1}]}"),
    ("list item missing a field", "standalone: {workloads: [{milli_cpu: 1}]}"),
    ("100,000-character value", "loop: {interval_s: '" + "9" * 100_000 + "'}"),
    ("a list, not a mapping", "[1, 2]"),
]


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def _fields(cls: type) -> list[tuple[str, Any, dataclasses.Field[Any]]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f) for f in dataclasses.fields(cls) if f.init]


def _constraints(f: dataclasses.Field[Any]) -> dict[str, float]:
    from qos.validation import BOUNDS
    b = f.metadata.get(BOUNDS)
    if b is None:
        return {}
    return {"gt" if b.low_open else "ge": b.low, "le": b.high}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def pydantic_validator() -> Callable[[object], object]:
    """A validator of the whole config built with pydantic v2 (strict, extra='forbid')."""
    import pydantic

    made: dict[type, type] = {}

    def conv(tp: Any) -> Any:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return typing.Union[tuple(conv(a) for a in typing.get_args(tp))]  # noqa: UP007
        if origin is tuple:  # YAML gives lists: strict mode takes only a tuple for a tuple
            return Annotated[tuple[conv(typing.get_args(tp)[0]), ...], pydantic.Strict(False)]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return model(tp)
        return tp

    def model(cls: type) -> type:
        if cls not in made:
            spec: dict[str, Any] = {}
            for name, tp, f in _fields(cls):
                inner = conv(tp)
                limits = _constraints(f)
                if limits:
                    num = next(a for a in _args(tp) if a in (int, float))
                    bounded = Annotated[num, pydantic.Field(**limits)]
                    inner = bounded | None if type(None) in _args(tp) else bounded
                default = _default(f)
                if dataclasses.is_dataclass(default):
                    sub = model(type(default))
                    spec[name] = (inner, pydantic.Field(default_factory=sub))
                else:
                    spec[name] = (inner, ... if default is dataclasses.MISSING else default)
            made[cls] = pydantic.create_model(
                cls.__name__, __config__=pydantic.ConfigDict(strict=True, extra="forbid"), **spec)
        return made[cls]

    from agent.config.agent import AgentConfig
    root = model(AgentConfig)
    validate: Callable[[object], object] = root.model_validate
    return validate


def pydantic_message(err: Exception) -> str:
    """pydantic's own text is several lines; this is the first error as one line, path dotted."""
    first = err.errors()[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
    return f"{path}: {first['msg']} (input {str(first.get('input'))[:40]!r})"


def msgspec_validator() -> Callable[[object], object]:
    """A validator of the whole config built with msgspec (strict, forbid_unknown_fields)."""
    import msgspec

    made: dict[type, type] = {}

    def conv(tp: Any) -> Any:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return typing.Union[tuple(conv(a) for a in typing.get_args(tp))]  # noqa: UP007
        if origin is tuple:
            return tuple[conv(typing.get_args(tp)[0]), ...]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return struct(tp)
        return tp

    def struct(cls: type) -> type:
        if cls not in made:
            spec: list[tuple[Any, ...]] = []
            for name, tp, f in _fields(cls):
                inner = conv(tp)
                limits = _constraints(f)
                if limits:
                    num = next(a for a in _args(tp) if a in (int, float))
                    bounded = Annotated[num, msgspec.Meta(**limits)]
                    inner = bounded | None if type(None) in _args(tp) else bounded
                default = _default(f)
                if dataclasses.is_dataclass(default):
                    spec.append((name, inner, msgspec.field(default_factory=struct(type(default)))))
                elif default is dataclasses.MISSING:
                    spec.append((name, inner))
                else:
                    spec.append((name, inner, default))
            spec.sort(key=len)  # required fields first, as a Struct wants them
            made[cls] = msgspec.defstruct(cls.__name__, spec, forbid_unknown_fields=True)
        return made[cls]

    from agent.config.agent import AgentConfig
    root = struct(AgentConfig)
    return lambda data: msgspec.convert(data, root, strict=True)


def handwritten_validator() -> Callable[[object], object]:
    from agent.config.agent import AgentConfig
    from agent.config.load import from_mapping
    return lambda data: from_mapping(AgentConfig, data)


def _run(check: Callable[[object], object], data: object, message: Callable[[Exception], str]) -> str:
    try:
        check(data)
    except Exception as err:  # what each library raises is its own
        return message(err)
    return "ACCEPTED"


def strictness() -> None:
    from agent.config.agent import with_source_defaults
    from agent.config.load import ConfigError, parse_yaml

    loaders = {"handwritten": (handwritten_validator(), str),
               "pydantic": (pydantic_validator(), pydantic_message)}
    try:
        loaders["msgspec"] = (msgspec_validator(), str)
    except ImportError:
        print("(msgspec not importable: its column is left out)")
    for what, text in CASES:
        try:
            data = with_source_defaults(parse_yaml(text.encode()))
        except ConfigError as err:
            print(f"{what}: refused by the YAML layer: {err}")
            continue
        print(f"## {what}: {text[:60]}")
        for name, (check, message) in loaders.items():
            out = _run(check, data, message)
            print(f"  {name:12} {len(out):4} chars{' (multi-line)' if chr(10) in out else ''}: {out[:160]}")
        if "pydantic" in loaders:
            try:
                loaders["pydantic"][0](data)
            except Exception as err:
                print(f"  {'pydantic raw':12} {len(str(err)):4} chars, {str(err).count(chr(10)) + 1} lines")


def cost(loader: str) -> None:
    t0 = time.perf_counter()
    import agent.cli.run  # noqa: F401 - what the agent process has loaded before it reads its config
    from agent.config.agent import load_config, with_source_defaults
    from agent.config.load import parse_yaml
    t1 = time.perf_counter()
    rss0 = _rss_kib()
    if loader == "handwritten":
        load_config(EXAMPLE)
    else:  # the library's import, its models and one validation of the same file
        check = pydantic_validator() if loader == "pydantic" else msgspec_validator()
        check(with_source_defaults(parse_yaml(EXAMPLE.read_bytes())))
    t2 = time.perf_counter()
    print(json.dumps({"loader": loader, "agent_import_s": round(t1 - t0, 4),
                      "config_s": round(t2 - t1, 4), "rss_before_kib": rss0, "rss_after_kib": _rss_kib(),
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "pydantic_loaded": "pydantic" in sys.modules}))


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    if sys.argv[1:2] == ["strictness"]:
        strictness()
    elif sys.argv[1:2] == ["cost"] and sys.argv[2:] in (["handwritten"], ["pydantic"], ["msgspec"]):
        cost(sys.argv[2])
    else:
        sys.exit(__doc__)
