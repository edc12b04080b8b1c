"""The kubelet's pods as memory QoS and CPU burst read them: each container's memory request and limit and
CPU limit (a pod labelled `koordinator.sh/qosClass: BE`: its batch-memory and batch-cpu), beside the one
pod list the kubelet source keeps (`KubeletSource`, same fetch, same validation)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agent.sources.kubelet import (
    KOORD_QOS_LABEL,
    KubeletSource,
    ParsedPod,
    PodError,
    amounts,
    jlist,
    jobj,
    status_ids,
)
from cgroups.layout import Layout
from qos.batch import BATCH_CPU, BATCH_MEMORY
from qos.memory_qos import QosContainer, QosPod
from qos.model import Tier

Containers = dict[str, tuple[QosContainer, ...]]  # pod uid -> its (non-init) containers


def _container(entry: Mapping[str, object], at: str, be: bool, cgroup: str | None) -> QosContainer:
    res = jobj(entry.get("resources"), f"{at}.resources")
    req = amounts(jobj(res.get("requests"), f"{at}.resources.requests"), f"{at}.resources.requests")
    lim = amounts(jobj(res.get("limits"), f"{at}.resources.limits"), f"{at}.resources.limits")
    mem, cpu = (BATCH_MEMORY, BATCH_CPU) if be else ("memory", "cpu")
    name = entry.get("name")
    name = name if isinstance(name, str) else ""
    restarts = _cpu_resize_restarts(entry, at)
    return QosContainer(name, cgroup, req.get(mem), lim.get(mem), lim.get(cpu), restarts)


def _cpu_resize_restarts(entry: Mapping[str, object], at: str) -> bool:
    """Whether the container's `resizePolicy` restarts it on a CPU resize (the default is NotRequired)."""
    for i, rp in enumerate(jlist(entry.get("resizePolicy"), f"{at}.resizePolicy")):
        rule = jobj(rp, f"{at}.resizePolicy[{i}]")
        if rule.get("resourceName") == "cpu":
            return rule.get("restartPolicy") == "RestartContainer"
    return False


def resizes_in_place(status: Mapping[str, object], where: str) -> bool | None:
    """Whether this pod's status shows a kubelet that resizes pods in place: with InPlacePodVerticalScaling
    the kubelet reports each running container's `resources` in its status (True); a running container
    without them says it does not (False); no running container says nothing (None)."""
    seen = None
    for i, cs in enumerate(jlist(status.get("containerStatuses"), f"{where}.status.containerStatuses")):
        entry = jobj(cs, f"{where}.status.containerStatuses[{i}]")
        if "resources" in entry or "allocatedResources" in entry:
            return True
        state = entry.get("state")
        if isinstance(state, Mapping) and "running" in state:
            seen = False
    return seen


def containers_of(pods: list[ParsedPod], doc: object, layout: Layout) -> tuple[Containers, bool | None]:
    """Each parsed pod's containers, read from the same PodList (a pod that does not read is left out), and
    whether the kubelet resizes pods in place (`resizes_in_place` over every pod: True if any shows it)."""
    tiers = {p.info.uid: p.workload.tier for p in pods}
    out: Containers = {}
    resizes: bool | None = None
    items = doc.get("items") if isinstance(doc, Mapping) else None
    for item in items if isinstance(items, list) else ():
        try:
            meta = jobj(jobj(item, "pod").get("metadata"), "pod.metadata")
            uid = meta.get("uid")
            if not isinstance(uid, str) or uid not in tiers:
                continue
            out[uid] = _containers(item, uid, tiers[uid], layout)
            shown = resizes_in_place(jobj(item.get("status"), f"pod {uid}.status"), f"pod {uid}")
            if shown is not None:
                resizes = bool(resizes) or shown
        except (PodError, ValueError):
            continue
    return out, resizes


def _containers(item: Any, uid: str, tier: Tier, layout: Layout) -> tuple[QosContainer, ...]:
    where = f"pod {uid}"
    labels = jobj(jobj(item.get("metadata"), where).get("labels"), f"{where}.labels")
    be = labels.get(KOORD_QOS_LABEL) == "BE"
    spec, status = jobj(item.get("spec"), f"{where}.spec"), jobj(item.get("status"), f"{where}.status")
    ids = status_ids(status, where)
    out = []
    for i, c in enumerate(jlist(spec.get("containers"), f"{where}.spec.containers")):
        entry = jobj(c, f"{where}.spec.containers[{i}]")
        name = entry.get("name")
        cgroup = None
        if isinstance(name, str) and name in ids:
            try:
                cgroup = layout.container(uid, tier, ids[name])
            except ValueError:
                cgroup = None
        out.append(_container(entry, f"{where}.spec.containers[{i}]", be, cgroup))
    return tuple(out)


class QosKubeletSource(KubeletSource):
    """The kubelet source, also keeping each pod's containers for memory QoS and CPU burst."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._containers: Containers = {}
        self._parsed: tuple[Containers, bool | None] = ({}, None)
        self.kubelet_resizes: bool | None = None  # None: not known yet (no running container seen)

    def _parse(self, doc: object) -> tuple[list[ParsedPod], list[str]]:
        pods, rejected = super()._parse(doc)
        self._parsed = containers_of(pods, doc, self._layout)
        return pods, rejected

    async def refresh(self) -> None:
        before = self._pods
        await super().refresh()
        if self._pods is not before:  # taken: the containers of that very list
            self._containers, shown = self._parsed
            if shown is not None:  # a kubelet that resizes stays one until a list shows otherwise
                self.kubelet_resizes = shown

    @property
    def listed(self) -> bool:
        """Whether the kubelet has answered a pod list yet (before it, no pod is known: none is gone)."""
        return math.isfinite(self._fresh.age_s())

    def qos_pods(self) -> tuple[QosPod, ...]:
        """Every pod of the last good list, protected ones marked (the policies leave them alone)."""
        return tuple(
            QosPod(p.workload.key, f"{p.info.namespace}/{p.info.name}", p.workload.cgroup, p.info.qos_class,
                   p.info.koord_qos, self._containers.get(p.info.uid, ()), p.workload.protected)
            for p in self._pods)
