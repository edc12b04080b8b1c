"""Renders deploy/overlays/<name> with the machine's `kubectl kustomize` (built-in kustomize v5)."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("standalone", "koordinator", "replace-koordlet")
# The kustomize Components an operator adds to an overlay (none of them is in an overlay)
COMPONENTS = ("prometheus", "grafana")
KOORDLET_PORT = 9316

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@functools.cache
def rendered_text(overlay: str) -> str:
    proc = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def rendered(overlay: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered_text(overlay)) if d is not None]


def with_components_kustomization(where: Path, overlay: str, components: tuple[str, ...]) -> Path:
    """A kustomization in `where` as an operator writes it: the overlay plus `components` of deploy/
    (kustomize takes only relative paths to them)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "overlays" / overlay, where)],
        "components": [os.path.relpath(DEPLOY / c, where) for c in components]}))
    return where


@functools.cache
def rendered_with_text(overlay: str, components: tuple[str, ...]) -> str:
    with tempfile.TemporaryDirectory(prefix="coloc-kustomize-") as tmp:
        root = with_components_kustomization(Path(tmp), overlay, components)
        proc = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def rendered_with(overlay: str, *components: str) -> list[dict[str, Any]]:
    """The overlay with some of `COMPONENTS` added."""
    return [d for d in yaml.safe_load_all(rendered_with_text(overlay, components)) if d is not None]


def one(overlay: str, kind: str) -> dict[str, Any]:
    found = [o for o in rendered(overlay) if o["kind"] == kind]
    assert len(found) == 1, (overlay, kind, len(found))
    return found[0]


def agent_container(overlay: str) -> dict[str, Any]:
    (c,) = one(overlay, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c


def config_text(overlay: str) -> str:
    text: str = one(overlay, "ConfigMap")["data"]["config.yaml"]
    return text


def pod_spec(overlay: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(overlay, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's final stage; continuations joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    stages = [i for i, ln in enumerate(joined) if ln.split(None, 1)[0].upper() == "FROM"]
    assert stages, "Dockerfile has no FROM"
    final = joined[stages[-1]:]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in final]


def image_exec_form() -> tuple[list[str], list[str]]:
    """The final stage's ENTRYPOINT and CMD (exec form, JSON arrays; the last of each wins, as in Docker)."""
    found: dict[str, list[str]] = {}
    for inst, args in _dockerfile_instructions():
        if inst in ("ENTRYPOINT", "CMD"):
            value = json.loads(args)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
                f"{inst} must be in exec form (a JSON array of strings), got {args!r}")
            found[inst] = value
    assert "ENTRYPOINT" in found and "CMD" in found, f"the final stage lacks ENTRYPOINT or CMD: {found}"
    return found["ENTRYPOINT"], found["CMD"]


def image_env(base_path: str) -> dict[str, str]:
    """The final stage's ENV (`KEY=value` form), `$PATH` expanded from `base_path` (the base image's PATH)."""
    env: dict[str, str] = {"PATH": base_path}
    for inst, args in _dockerfile_instructions():
        if inst == "ENV":
            for item in shlex.split(args):
                key, sep, value = item.partition("=")
                assert sep, f"ENV must use KEY=value, got {item!r}"
                env[key] = value.replace("$PATH", env.get("PATH", "")).replace("${PATH}", env.get("PATH", ""))
    return env
