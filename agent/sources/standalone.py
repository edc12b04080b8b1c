"""Standalone mode, the embedded default: workloads come from scanning the agent's cgroup root.

Children of the besteffort tier are BE, `<besteffort>/<yarn hierarchy>/container_*` are YARN BE containers,
children of the burstable tier and every other child of the root are HP (guaranteed pods sit directly under
the root, as the kubelet lays them out). Priorities and requests come from config, keyed by cgroup.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from agent.config.load import parse_bytes
from agent.config.standalone import StandaloneConfig
from qos.ids import IdError, parse_container_id
from qos.model import Resources, Source, Tier, Workload

log = logging.getLogger("coloc.standalone")


def parse_yarn_container(name: str) -> tuple[str, int] | None:
    """`container_…` → (application id, container sequence), or None when the name is not a container id."""
    try:
        cid = parse_container_id(name)
    except IdError:
        return None
    return cid.app_id, cid.seq


class StandaloneScanner:
    """Lists the workloads under the root. `children(rel)` lists sub-cgroups (from the cgroup reader)."""

    def __init__(self, cfg: StandaloneConfig, children: Callable[[str], list[str]], be_tier: str,
                 burstable_tier: str, yarn_hierarchy: str, cgroup_dir: Callable[[str], str],
                 scan_yarn: bool = True) -> None:
        self._cfg = cfg
        self._children = children
        self._be = be_tier
        self._burstable = burstable_tier
        self._yarn = yarn_hierarchy
        self._dir_of = cgroup_dir
        self._scan_yarn = scan_yarn  # off when the NodeManager source lists the containers
        self._by_cgroup = {w.cgroup.strip("/"): w for w in cfg.workloads}
        # A cgroup's workload is the same every tick while it stays listed (its start time is its first
        # sighting's): it is built once, not once per tick (hundreds of cgroups, every second), and the
        # whole list only when a directory listing changed.
        self._known: dict[str, Workload] = {}
        self._listed: dict[str, list[str]] | None = None  # the listing `_scanned` was built from
        self._scanned: list[Workload] = []
        self._warned: set[str] = set()

    def _started(self, rel: str) -> float:
        try:
            return os.stat(self._dir_of(rel)).st_ctime
        except OSError:
            return time.time()

    def _make(self, rel: str, tier: Tier, be: bool, source: Source,
              app_id: str | None = None, seq: int | None = None) -> Workload:
        known = self._known.get(rel)
        if known is not None:
            return known
        conf = self._by_cgroup.get(rel)
        default_prio = self._cfg.be_priority if be else self._cfg.hp_priority
        prio = conf.priority if conf and conf.priority is not None else default_prio
        req = Resources(conf.milli_cpu, parse_bytes(conf.memory, "memory")) if conf else Resources()
        key = f"yarn/{rel.rsplit('/', 1)[-1]}" if source is Source.YARN else f"local/{rel}"
        w = self._known[rel] = Workload(
            key=key, name=rel.rsplit("/", 1)[-1], source=source, tier=tier, be=be, priority=prio, cgroup=rel,
            requests=req, started_at=self._started(rel), app_id=app_id, container_seq=seq)
        return w

    def scan(self) -> list[Workload]:
        """The workloads under the root now. The directories are listed at every call (a cgroup made
        before it is in its answer); the list is built again only when a listing changed."""
        listing = self._listing()
        if listing != self._listed:
            self._scanned = self._build(listing)
            self._listed = listing
        return list(self._scanned)

    def _listing(self) -> dict[str, list[str]]:
        """Child names of the root and of each directory below it that holds workloads."""
        root = self._children("")
        listing = {"": root}
        for name in root:
            if name == self._be:
                listing[name] = be = self._children(name)
                if self._scan_yarn and self._yarn in be:
                    yarn = f"{name}/{self._yarn}"
                    listing[yarn] = self._children(yarn)
            elif name == self._burstable:
                listing[name] = self._children(name)
        return listing

    def _build(self, listing: dict[str, list[str]]) -> list[Workload]:
        out: list[Workload] = []
        seen: set[str] = set()
        for name in listing[""]:
            if name == self._be:
                for child in listing[name]:
                    rel = f"{name}/{child}"
                    if child == self._yarn:
                        if self._scan_yarn:
                            out.extend(self._yarn_containers(rel, listing[rel], seen))
                    else:
                        out.append(self._make(rel, Tier.BESTEFFORT, True, Source.LOCAL))
                        seen.add(rel)
            elif name == self._burstable:
                for child in listing[name]:
                    rel = f"{name}/{child}"
                    out.append(self._make(rel, Tier.BURSTABLE, False, Source.LOCAL))
                    seen.add(rel)
            else:
                out.append(self._make(name, Tier.GUARANTEED, False, Source.LOCAL))
                seen.add(name)
        for gone in self._known.keys() - seen:
            del self._known[gone]
        return out

    def _yarn_containers(self, yarn_rel: str, names: list[str], seen: set[str]) -> list[Workload]:
        out = []
        for child in names:
            rel = f"{yarn_rel}/{child}"
            parsed = parse_yarn_container(child)
            if parsed is None:
                if rel not in self._warned:
                    self._warned.add(rel)
                    log.warning("ignoring cgroup in the YARN hierarchy: not a container id",
                                extra={"fields": {"cgroup": rel}})
                continue
            app_id, seq = parsed
            out.append(self._make(rel, Tier.BESTEFFORT, True, Source.YARN, app_id, seq))
            seen.add(rel)
        return out

