"""Large but real-format payloads for the payload tests: copies of the checked-in fixture pods/containers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_pod(name: str = "web-7d9f8c-x2x9z") -> dict[str, object]:
    mixed = json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text())
    pod: dict[str, object] = next(p for p in mixed["items"] if p["metadata"]["name"] == name)
    return pod


def pod_copies(n: int, template: dict[str, object] | None = None, start: int = 0) -> list[dict[str, object]]:
    """`n` copies of a fixture pod, each with its own name and UID (all valid)."""
    template = template or fixture_pod()
    out = []
    for i in range(start, start + n):
        p = copy.deepcopy(template)
        meta = p["metadata"]
        assert isinstance(meta, dict)
        meta.update(name=f"copy-{i}", uid=f"5e6f7a8b-0000-4000-8000-{i:012d}")
        out.append(p)
    return out


def podlist_body(items: list[dict[str, object]], min_bytes: int = 0) -> bytes:
    """A v1 PodList of `items`, padded with copies of the fixture's HP pod to at least `min_bytes`."""
    doc = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(items)}
    body = json.dumps(doc).encode()
    added = 0
    while len(body) < min_bytes:
        one = len(json.dumps(pod_copies(1, start=added)[0])) + 2
        n = (min_bytes - len(body)) // one + 1
        doc["items"] += pod_copies(n, start=added)
        added += n
        body = json.dumps(doc).encode()
    return body
