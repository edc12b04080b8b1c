"""`koordinator.sh/priority-class` as Koordinator resolves it (apis/extension/priority.go), on pods from the
checked-in kubelet payload (parsed by the kubelet source itself)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agent.sources.kubelet import koord_priority_class, parse_pod
from cgroups.layout import Layout

FIX = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize(
    ("labels", "priority", "qos", "want"),
    [
        ({"koordinator.sh/priority-class": "koord-batch"}, 9500, "LS", "koord-batch"),  # the label wins
        ({"koordinator.sh/priority-class": "gold"}, 9500, "LS", "koord-prod"),  # unknown: none, then QoS
        ({"koordinator.sh/priority-class": "gold"}, 9500, "BE", "koord-batch"),
        ({"koordinator.sh/priority-class": ""}, 5500, "", ""),  # present but empty: never spec.priority
        ({}, 7500, "BE", "koord-mid"),
        ({}, 3500, "LSR", "koord-free"),
        ({}, 0, "", ""),
    ],
)
def test_resolution(labels: dict[str, str], priority: int, qos: str, want: str) -> None:
    assert koord_priority_class(labels, priority, qos) == want


def _pod(labels: dict[str, str]) -> object:
    mixed = json.loads((FIX / "kubelet" / "podlist-mixed.json").read_text())
    hp = next(p for p in mixed["items"] if p["status"].get("qosClass") == "Burstable")
    pod = copy.deepcopy(hp)
    pod["metadata"]["labels"] = {**(pod["metadata"].get("labels") or {}), **labels}
    return pod


def test_a_batch_label_makes_a_burstable_pod_batch_unless_the_qos_label_says_otherwise() -> None:
    layout = Layout("cgroupfs")
    plain = parse_pod(_pod({}), layout)
    assert plain is not None and not plain.workload.be
    labelled = parse_pod(_pod({"koordinator.sh/priority-class": "koord-batch"}), layout)
    assert labelled is not None and labelled.workload.be
    pinned = parse_pod(
        _pod({"koordinator.sh/priority-class": "koord-batch", "koordinator.sh/qosClass": "LS"}), layout
    )
    assert pinned is not None and not pinned.workload.be
    odd = parse_pod(_pod({"koordinator.sh/priority-class": "gold"}), layout)
    assert odd is not None and not odd.workload.be
