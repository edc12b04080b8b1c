"""Renders deploy/overlays/<name> with the machine's `kubectl kustomize` (built-in kustomize v5)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("standalone", "koordinator", "replace-koordlet")
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
