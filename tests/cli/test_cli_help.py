"""Every `coloc-agent` command says what it does and what each of its options is for: the test walks the
argparse parser of every subcommand (as its own `main` builds it, nested subcommands included) and fails
on an option or argument without help text or a (sub)command without a description. `--help` itself is
read from real subprocesses."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agent.cli.main import COMMANDS


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def built_parser(name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser subcommand `name` builds: its `main` runs until it parses its arguments."""
    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Built(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", capture)
        m.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        module = importlib.import_module(COMMANDS[name][0])
        argv = [name] if name in ("decommission", "recommission") else []  # as agent.cli.main passes them
        with pytest.raises(_Built) as built:
            module.main(argv)
    return built.value.parser


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every subcommand parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """The options and arguments of `parser` with no help text (`-h` aside; a hidden one is deliberate)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            out.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    return out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help_and_every_command_a_description(name: str, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    top = built_parser(name, monkeypatch)
    seen = list(parsers(top))
    missing = [m for p in seen for m in undocumented(p)]
    assert not missing, f"options without help: {missing}"
    for p in seen:
        if p is top and name in ("decommission", "recommission"):
            continue  # one parser for the two; each subcommand's own description is what --help shows
        assert (p.description or "").strip(), f"{p.prog}: no description"


def test_decommission_and_recommission_each_have_their_own_description(monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    top = built_parser("decommission", monkeypatch)
    subs = {p.prog.rsplit(" ", 1)[-1]: p for p in parsers(top) if p is not top}
    assert set(subs) == {"decommission", "recommission"}
    for name, p in subs.items():
        out = subprocess.run([sys.executable, "-m", "agent.cli", name, "--help"], capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        first = " ".join(out.stdout.split("\n\n")[1].split())
        assert first == " ".join((p.description or "").split()) and len(first) > 40, out.stdout


def test_the_walk_finds_an_option_without_help() -> None:
    p = argparse.ArgumentParser(prog="x", description="d")
    p.add_argument("--fine", help="documented")
    p.add_argument("--bare")
    sub = p.add_subparsers().add_parser("inner", description="d")
    sub.add_argument("thing")
    assert sorted(m for q in parsers(p) for m in undocumented(q)) == ["x --bare", "x inner thing"]


def test_help_lists_the_config_command() -> None:
    out = subprocess.run([sys.executable, "-m", "agent.cli", "--help"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0
    assert any(line.split()[:1] == ["config"] for line in out.stdout.splitlines()), out.stdout
