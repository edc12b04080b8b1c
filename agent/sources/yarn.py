"""The YARN NodeManager's containers (`/ws/v1/node/{info,apps,containers}`) joined with their cgroups.

The NodeManager is found at a configured URL or through the kubelet (the pod labelled
`app.kubernetes.io/component=node-manager`: `localhost:<port>` with hostNetwork, else `<pod IP>:<port>`).
Every id is parsed strictly before it can become a path. Containers are cross-checked with the
`container_*` directories under `<besteffort>/<yarn hierarchy>` on every `workloads()` call:

- known to the NM and a cgroup exists → a running (or terminating) YARN workload;
- known to the NM, no cgroup yet → pending launch (its allocation still counts in the ledger);
- a cgroup the NM does not list → still BE usage: a workload with no requests;
- a dying container (EXITED_*, KILLING, clean-up states, DONE) → `terminating` with no requests: its cgroup is
  usage, its allocation is gone (`holds_resources`; the table is in docs/sources.md).

A NodeManager that is down, slow, or answers garbage keeps the last good data; once that is older than
the bound the result is stale, and the loop evicts nothing while any source is stale.
YARN memory is in MB that are MiB (`yarn.nodemanager.resource.memory-mb`): × 2^20 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from agent.config.sources import NodeManagerConfig
from agent.sources.fetch_errors import FETCH_ERRORS
from agent.sources.http import FetchError, HttpEndpoint, HttpFetcher
from agent.sources.kubelet import KubeletSource
from agent.sources.result import Freshness, SourceResult, YarnContainerInfo
from cgroups.errors import CgroupError
from cgroups.layout import Layout
from qos.ids import ContainerId, IdError, parse_app_id, parse_container_id
from qos.model import Resources, Source, Tier, Workload

log = logging.getLogger("coloc.sources.yarn")

MIB = 1 << 20
MAX_VCORES = 100_000  # nodeInfo totals only; a container is bounded by the node's capacity (`over_capacity`)
MAX_MEMORY_MB = 1 << 30  # 1 PiB in MiB
JAVA_INT_MAX = 2**31 - 1  # the REST fields are Java ints: anything larger is not a NodeManager answer
JAVA_LONG_MAX = 2**63 - 1
MAX_CONTAINERS = 100_000

# The NodeManager's ContainerState (hadoop-yarn-server-nodemanager, containermanager/container/ContainerState
# .java; LOCALIZED is from 3.0 alphas, later SCHEDULED). The table is in docs/sources.md.
PENDING_STATES = frozenset({"NEW", "LOCALIZING", "LOCALIZED", "SCHEDULED"})
RUNNING_STATES = frozenset({"RUNNING", "RELAUNCHING", "REINITIALIZING", "REINITIALIZING_AWAITING_KILL",
                            "PAUSING", "PAUSED", "RESUMING"})
LIVE_STATES = PENDING_STATES | RUNNING_STATES
TERMINATING_STATES = frozenset({"KILLING", "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE",
                                "CONTAINER_CLEANEDUP_AFTER_KILL", "CONTAINER_RESOURCES_CLEANINGUP"})
GONE_STATES = frozenset({"DONE", "LOCALIZATION_FAILED"})
DYING_STATES = TERMINATING_STATES | GONE_STATES
KNOWN_STATES = LIVE_STATES | DYING_STATES
APP_STATES = frozenset({"NEW", "INITING", "RUNNING", "FINISHING_CONTAINERS_WAIT",
                        "APPLICATION_RESOURCES_CLEANINGUP", "FINISHED"})


class NmPayloadError(ValueError):
    """A NodeManager document is not in the documented shape."""


@dataclass(frozen=True, slots=True)
class NmContainer:
    cid: ContainerId
    state: str
    user: str
    requests: Resources
    execution_type: str


@dataclass(frozen=True, slots=True)
class NmNodeInfo:
    node_id: str
    hostname: str
    version: str
    healthy: bool
    started_at_ms: int  # nmStartupTime (3.x); 0 on 2.x — an NM incarnation marker
    total: Resources  # configured for containers


@dataclass(frozen=True, slots=True)
class NmView:
    info: NmNodeInfo
    apps: Mapping[str, str]  # app id -> state
    containers: Mapping[str, NmContainer]  # container id -> container


def _wrapped_list(doc: object, outer: str, inner: str) -> list[object]:
    """`{"<outer>": {"<inner>": [...]}}` with the Jersey quirks: `{"<outer>": null}` or `{}` for none,
    and a lone object instead of a one-element list."""
    if not isinstance(doc, Mapping) or outer not in doc:
        raise NmPayloadError(f"expected an object with {outer!r}")
    body = doc[outer]
    if body is None:
        return []
    if not isinstance(body, Mapping):
        raise NmPayloadError(f"{outer}: expected an object, got {type(body).__name__}")
    items = body.get(inner)
    if items is None:
        return []
    if isinstance(items, Mapping):
        return [items]
    if not isinstance(items, list):
        raise NmPayloadError(f"{outer}.{inner}: expected a list, got {type(items).__name__}")
    return items


def _int(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NmPayloadError(f"{where}: expected an integer, got {value!r:.40}")
    if not low <= value <= high:
        raise NmPayloadError(f"{where}: {value} is out of range [{low}, {high}]")
    return value


def _text(value: object, where: str, limit: int = 256) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise NmPayloadError(f"{where}: expected a string of at most {limit} characters")
    return value


def parse_node_info(doc: object) -> NmNodeInfo:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("nodeInfo"), Mapping):
        raise NmPayloadError("expected an object with 'nodeInfo'")
    n = doc["nodeInfo"]
    mem = _int(n.get("totalPmemAllocatedContainersMB", 0), "nodeInfo.totalPmemAllocatedContainersMB",
               0, MAX_MEMORY_MB)
    vcores = _int(n.get("totalVCoresAllocatedContainers", 0), "nodeInfo.totalVCoresAllocatedContainers",
                  0, MAX_VCORES)
    started = _int(n.get("nmStartupTime", 0), "nodeInfo.nmStartupTime", 0, 2**63 - 1)
    healthy = n.get("nodeHealthy", True)
    if not isinstance(healthy, bool):
        raise NmPayloadError("nodeInfo.nodeHealthy: expected true or false")
    return NmNodeInfo(
        node_id=_text(n.get("id"), "nodeInfo.id"),
        hostname=_text(n.get("nodeHostName"), "nodeInfo.nodeHostName"),
        version=_text(n.get("nodeManagerVersion"), "nodeInfo.nodeManagerVersion"), healthy=healthy,
        started_at_ms=started, total=Resources(vcores * 1000, mem * MIB))


def parse_apps(doc: object) -> tuple[dict[str, str], list[str]]:
    """`{"apps":{"app":[{"id","state","containerids"?}]}}` → app id → state, and rejection reasons."""
    apps: dict[str, str] = {}
    rejected: list[str] = []
    for i, raw in enumerate(_wrapped_list(doc, "apps", "app")):
        try:
            if not isinstance(raw, Mapping):
                raise NmPayloadError("expected an object")
            app_id = parse_app_id(raw.get("id"))
            state = _text(raw.get("state"), "state", 64)
            if state not in APP_STATES:
                raise NmPayloadError(f"unknown application state {state!r}")
            cids = raw.get("containerids") or []
            if not isinstance(cids, list):
                raise NmPayloadError(f"containerids: expected a list, got {type(cids).__name__}")
            for cid in cids:
                parse_container_id(cid)
        except (NmPayloadError, IdError) as err:
            rejected.append(f"apps.app[{i}]: {err}")
            continue
        apps[app_id] = state
    return apps, rejected


def parse_containers(doc: object) -> tuple[dict[str, NmContainer], list[str]]:
    """`{"containers":{"container":[…]}}` → container id → container, and rejection reasons."""
    items = _wrapped_list(doc, "containers", "container")
    if len(items) > MAX_CONTAINERS:
        raise NmPayloadError(f"containers: {len(items)} entries, more than {MAX_CONTAINERS}")
    out: dict[str, NmContainer] = {}
    rejected: list[str] = []
    for i, raw in enumerate(items):
        where = f"containers.container[{i}]"
        try:
            if not isinstance(raw, Mapping):
                raise NmPayloadError("expected an object")
            cid = parse_container_id(raw.get("id"))
            where = f"container {cid.text}"
            state = _text(raw.get("state"), "state", 64)  # an unknown state is kept: see `holds_resources`
            # Only the wire format bounds these here; the node's capacity bounds them in `over_capacity`.
            vcores = _int(raw.get("totalVCoresNeeded", 0), "totalVCoresNeeded", 0, JAVA_INT_MAX)
            mem_mb = _int(raw.get("totalMemoryNeededMB", 0), "totalMemoryNeededMB", 0, JAVA_LONG_MAX)
            container = NmContainer(
                cid=cid, state=state, user=_text(raw.get("user"), "user"),
                requests=Resources(vcores * 1000, mem_mb * MIB),
                execution_type=_text(raw.get("executionType"), "executionType", 32))
        except (NmPayloadError, IdError) as err:
            rejected.append(f"{where}: {err}")
            continue
        if cid.text in out:
            rejected.append(f"{where}: listed twice")
            continue
        out[cid.text] = container
    return out, rejected


def holds_resources(state: str) -> bool:
    """Whether a container in this NodeManager state holds its allocation (counts as requested).

    A state this agent does not know (a newer NodeManager) reads as holding. Counting a container that
    holds nothing can only refuse or evict batch work, which the scheduler places again; not counting one
    that does hold resources lets batch be admitted beyond the origin and overcommits the node under its
    HP services, which is the harm this agent exists to prevent."""
    return state not in DYING_STATES


def over_capacity(c: NmContainer, capacity: Resources) -> str | None:
    """Why a container cannot be as large as it says (larger than the whole node), or None."""
    if c.requests.milli_cpu > capacity.milli_cpu:
        return (f"container {c.cid.text}: totalVCoresNeeded: {c.requests.milli_cpu // 1000} vcores exceed "
                f"the node's capacity of {capacity.milli_cpu} milli-CPU")
    if c.requests.memory_bytes > capacity.memory_bytes:
        return (f"container {c.cid.text}: totalMemoryNeededMB: {c.requests.memory_bytes // MIB} MiB exceed "
                f"the node's capacity of {capacity.memory_bytes // MIB} MiB")
    return None


def nm_url_from_pod(host_network: bool, pod_ips: Sequence[str], scheme: str, port: int) -> str | None:
    if host_network:
        return f"{scheme}://localhost:{port}"
    for ip in pod_ips:
        addr = ipaddress.ip_address(ip)
        return f"{scheme}://[{addr}]:{port}" if addr.version == 6 else f"{scheme}://{addr}:{port}"
    return None


class NodeManagerSource:
    """YARN containers on this node. `children(rel)` lists child cgroups (relative paths, as
    `CgroupReader.children`); `cgroup_dir(rel)` gives a directory to stat for the start time. `capacity`
    (the node's) bounds a container's size: a larger one is dropped with a reason."""

    name = "yarn"

    def __init__(self, cfg: NodeManagerConfig, layout: Layout, children: Callable[[str], Sequence[str]], *,
                 kubelet: KubeletSource | None = None, cgroup_dir: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 capacity: Resources | None = None) -> None:
        if not cfg.url and kubelet is None:
            raise ValueError("sources.yarn.url: empty and no kubelet source to discover the NodeManager from")
        self.cfg = cfg
        self._layout = layout
        self._children = children
        self._cgroup_dir = cgroup_dir
        self._kubelet = kubelet
        self._wall = wall
        self._fresh = Freshness("yarn", cfg.stale_after_s, log, clock)
        self._fetcher: HttpFetcher | None = None
        self._view: NmView | None = None
        self._rejected: tuple[str, ...] = ()
        self._warned: set[str] = set()
        self._first_seen: dict[str, float] = {}
        self._from_cgroup: set[str] = set()
        self._capacity = capacity
        self._classify_warned: set[str] = set()

    @property
    def node_info(self) -> NmNodeInfo | None:
        return self._view.info if self._view else None

    def applications(self) -> Mapping[str, str]:
        return MappingProxyType(dict(self._view.apps)) if self._view else MappingProxyType({})

    def _endpoint(self) -> str | None:
        if self.cfg.url:
            return self.cfg.url
        assert self._kubelet is not None
        pod = self._kubelet.find_pod(self.cfg.label_key, self.cfg.label_value)
        if pod is None:
            return None
        return nm_url_from_pod(pod.host_network, pod.pod_ips, self.cfg.scheme, self.cfg.port)

    def _fetcher_for(self, url: str) -> HttpFetcher:
        if self._fetcher is None or self._fetcher.url != url:
            if self._fetcher is not None:
                log.info("yarn: NodeManager endpoint moved from %s to %s", self._fetcher.url, url)
            self._fetcher = HttpFetcher(HttpEndpoint(
                base_url=url, timeout_s=self.cfg.timeout_s, max_body_bytes=self.cfg.max_body_bytes,
                ca_file=self.cfg.ca_file, insecure_skip_verify=self.cfg.insecure_skip_verify))
        return self._fetcher

    async def refresh(self) -> None:
        url = self._endpoint()
        if url is None:
            why = f"down: no running NodeManager pod labelled {self.cfg.discovery_label}"
            FETCH_ERRORS.inc(self.name, "down")
            self._fresh.failed(why, "down")
            return
        fetcher = self._fetcher_for(url)
        try:  # each document fetched, decoded and parsed in one worker-thread call, off the loop
            info, (apps, rejected_apps), (containers, rejected) = await asyncio.gather(
                fetcher.aget_parsed("/ws/v1/node/info", parse_node_info),
                fetcher.aget_parsed("/ws/v1/node/apps", parse_apps),
                fetcher.aget_parsed("/ws/v1/node/containers", parse_containers))
        except FetchError as err:
            FETCH_ERRORS.inc(self.name, err.kind)
            self._fresh.failed(str(err), err.kind)
            return
        except NmPayloadError as err:
            FETCH_ERRORS.inc(self.name, "garbage")
            self._fresh.failed(f"garbage: {url}: not a NodeManager answer: {err}", "garbage")
            return
        self._view = NmView(info, MappingProxyType(apps), MappingProxyType(containers))
        self._note_rejected(rejected_apps + rejected)
        self._fresh.ok()

    def _note_rejected(self, rejected: list[str]) -> None:
        self._rejected = tuple(rejected)
        for reason in rejected:
            if reason not in self._warned:
                log.warning("yarn: entry rejected: %s", reason)
        self._warned = set(rejected)

    def _cgroup_ids(self) -> dict[str, ContainerId]:
        """Container ids of the `container_*` cgroups under the YARN root; other names are ignored."""
        root = self._layout.yarn_root()
        try:
            rels = self._children(root)
        except CgroupError:
            return {}
        out: dict[str, ContainerId] = {}
        for rel in rels:
            name = rel.rsplit("/", 1)[-1]
            try:
                out[name] = parse_container_id(name)
            except IdError as err:
                if rel not in self._warned:
                    self._warned.add(rel)
                    log.warning("yarn: ignoring cgroup %s: %s", rel, err)
        return out

    def _started(self, cid: str, rel: str, has_cgroup: bool) -> float:
        """When the container started: its cgroup's ctime once it has one, else when first seen."""
        at = self._first_seen.get(cid)
        if at is not None and (cid in self._from_cgroup or not has_cgroup):
            return at
        if has_cgroup:
            self._from_cgroup.add(cid)
            if self._cgroup_dir is not None:
                with contextlib.suppress(OSError, CgroupError):
                    at = os.stat(self._cgroup_dir(rel)).st_ctime
        at = at if at is not None else self._wall()
        self._first_seen[cid] = at
        return at

    def workloads(self) -> SourceResult:
        cgroups = self._cgroup_ids()
        nm = self._view.containers if self._view else {}
        workloads: list[Workload] = []
        infos: dict[str, YarnContainerInfo] = {}
        live: set[str] = set()
        too_big: list[str] = []
        notes: list[str] = []
        for text, c in nm.items():
            has_cgroup = text in cgroups
            why = over_capacity(c, self._capacity) if self._capacity is not None else None
            if why is not None:
                too_big.append(why)
                continue
            if c.state not in KNOWN_STATES:
                notes.append(f"container {text}: unknown state {c.state!r}, counted as holding its resources")
            if c.state in GONE_STATES and not has_cgroup:
                continue
            live.add(text)
            # A dying container holds no allocation; its cgroup, while there, is still BE usage.
            holds = holds_resources(c.state)
            workloads.append(self._workload(c.cid, c.requests if holds else Resources(), has_cgroup,
                                            terminating=not holds))
            infos[f"yarn/{text}"] = YarnContainerInfo(
                container_id=text, app_id=c.cid.app_id, state=c.state, user=c.user, has_cgroup=has_cgroup,
                known_to_nm=True, execution_type=c.execution_type)
        for text, cid in cgroups.items():
            if text in live:
                continue
            live.add(text)
            workloads.append(self._workload(cid, Resources(), True, terminating=False))
            infos[f"yarn/{text}"] = YarnContainerInfo(
                container_id=text, app_id=cid.app_id, state="", user="", has_cgroup=True, known_to_nm=False)
        for gone in set(self._first_seen) - live:
            del self._first_seen[gone]
            self._from_cgroup.discard(gone)
        self._warn_once(too_big + notes)
        return SourceResult(
            workloads=tuple(workloads), stale_reason=self._fresh.stale_reason(), age_s=self._fresh.age_s(),
            containers=MappingProxyType(infos), rejected=self._rejected + tuple(too_big))

    def _warn_once(self, lines: list[str]) -> None:
        """Log each classification problem once while it lasts (workloads() runs every tick)."""
        for line in lines:
            if line not in self._classify_warned:
                log.warning("yarn: %s", line)
        self._classify_warned = set(lines)

    def _workload(self, cid: ContainerId, requests: Resources, has_cgroup: bool,
                  terminating: bool) -> Workload:
        rel = self._layout.yarn_container(cid.text)
        return Workload(
            key=f"yarn/{cid.text}", name=cid.text, source=Source.YARN, tier=Tier.BESTEFFORT, be=True,
            priority=self.cfg.priority, cgroup=rel, requests=requests,
            started_at=self._started(cid.text, rel, has_cgroup), app_id=cid.app_id, container_seq=cid.seq,
            terminating=terminating)
