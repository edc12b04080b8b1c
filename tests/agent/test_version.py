"""One copy of the version: `agent.__version__`, which pyproject.toml reads and the CLI prints."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

import agent
from agent.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_installed_metadata_matches_the_package() -> None:
    assert importlib.metadata.version("coloc-agent") == agent.__version__


def test_pyproject_takes_the_version_from_the_package() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in meta["project"]
    assert "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agent.__version__"}


def test_cli_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"coloc-agent {agent.__version__}"
