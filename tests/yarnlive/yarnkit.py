"""The yarnlive NodeManager fixture's containers (tests/fixtures/nodemanager/yarnlive-mixed): their ids, the
live ones with their (vcores, MiB), the dying ones with their ContainerState."""

from __future__ import annotations

from pathlib import Path

from qos.model import Resources

MIB = 1 << 20
GIB = 1 << 30
TS = 1700000000000
MIXED = Path(__file__).resolve().parent.parent / "fixtures" / "nodemanager" / "yarnlive-mixed"


def cid(app: int, seq: int) -> str:
    return f"container_e17_{TS}_{app:04d}_01_{seq:06d}"


# The fixture's containers by the NodeManager's ContainerState, with their (vcores, MiB).
LIVE = {cid(1, 1): (1, 1024), cid(1, 2): (2, 2048), cid(1, 3): (1, 512), cid(2, 1): (1, 1024),
        cid(2, 2): (1, 512)}
DYING_WITH_STATE = {cid(1, 4): "EXITED_WITH_SUCCESS", cid(1, 5): "KILLING", cid(1, 6): "DONE",
                    cid(2, 3): "CONTAINER_RESOURCES_CLEANINGUP", cid(2, 4): "EXITED_WITH_FAILURE",
                    cid(2, 5): "LOCALIZATION_FAILED", cid(2, 6): "CONTAINER_CLEANEDUP_AFTER_KILL"}
LIVE_TOTAL = Resources(sum(v for v, _ in LIVE.values()) * 1000, sum(m for _, m in LIVE.values()) * MIB)
