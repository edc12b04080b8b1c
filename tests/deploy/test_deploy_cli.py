"""CLI basics, through the installed `coloc-agent` script: --version from the package metadata, no
arguments prints help and exits 2, and the LICENSE is the Apache-2.0 text pyproject declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("coloc-agent")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


def test_version_comes_from_the_package_metadata() -> None:
    proc = run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"coloc-agent {version('coloc-agent')}"


def test_no_arguments_prints_help_and_exits_2() -> None:
    proc = run()
    assert proc.returncode == 2
    assert "usage: coloc-agent" in proc.stderr and "run " in proc.stderr


def test_help_still_exits_0_and_unknown_command_2() -> None:
    assert run("--help").returncode == 0
    bad = run("no-such-command")
    assert bad.returncode == 2 and "unknown command" in bad.stderr


def test_license_is_apache_2_as_declared() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    assert any(c.startswith("License :: OSI Approved :: Apache") for c in meta["classifiers"])
    assert meta["urls"]
