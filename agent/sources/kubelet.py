"""The kubelet's pod list (`GET /pods`, a v1 PodList) mapped to workloads.

Resync every `resync_s`, and sooner (at most every `min_resync_gap_s`) after `request_resync()`: the
sources ask for it when a pod cgroup appears that the last list does not name (a pod started since).
An empty list, garbage or no answer keeps the last good list (a kubelet that is restarting answers empty;
the agent's own pod is always on the node); the data is marked stale once the last good answer is older
than the bound.
Each pod is validated on its own: a malformed pod is dropped with a reason, the rest are kept. A protected
pod (`qos.protection`: kube-proxy, CNI agents, static pods, …) is never BE, whatever its QoS class.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from agent.config.sources import KubeletConfig
from agent.sources.fetch_errors import FETCH_ERRORS
from agent.sources.http import FetchError, HttpEndpoint, HttpFetcher
from agent.sources.result import Freshness, PodInfo, SourceResult
from cgroups.layout import Layout
from qos.batch import BATCH_CPU, BATCH_MEMORY
from qos.batch_limits import EXTENDED_RESOURCE_SPEC, BatchAmounts, BatchContainer, BatchPod
from qos.ids import IdError, check_pod_uid
from qos.model import Resources, Source, Tier, Workload
from qos.protection import ConflictNotes, PodFacts, ProtectionConfig, protection_reason
from qos.quantity import QuantityError, to_int, to_milli

log = logging.getLogger("coloc.sources.kubelet")

KOORD_QOS_LABEL = "koordinator.sh/qosClass"
KOORD_QOS = ("LSE", "LSR", "LS", "BE", "SYSTEM")
KOORD_PRIORITY_LABEL = "koordinator.sh/priority-class"
KOORD_PRIORITY_CLASSES = ("koord-prod", "koord-mid", "koord-batch", "koord-free")
_KOORD_PRIORITY_RANGES = (("koord-prod", 9000, 9999), ("koord-mid", 7000, 7999),
                          ("koord-batch", 5000, 5999), ("koord-free", 3000, 3999))
_QOS_FROM_K8S = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}
_K8S_QOS = {"Guaranteed": Tier.GUARANTEED, "Burstable": Tier.BURSTABLE, "BestEffort": Tier.BESTEFFORT}
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# Per-pod sanity bounds: beyond these a value is a typo or an attack, not a pod.
MAX_POD_MILLI_CPU = 10_000_000  # 10 000 cores
MAX_POD_MEMORY_BYTES = 1 << 50  # 1 PiB
MAX_CONTAINERS = 256
MAX_ANNOTATION_BYTES = 256 * 1024  # the API server's limit on all of a pod's annotations together
MAX_OWNER_REFERENCES = 64
DEFAULT_PROTECTION = ProtectionConfig()
_CONFLICTS = ConflictNotes()  # for callers that parse without a source of their own


class PodError(ValueError):
    """One pod of the list is malformed; the message names the pod and the field."""


class PodListError(ValueError):
    """The document is not a v1 PodList."""


@dataclass(frozen=True, slots=True)
class ParsedPod:
    workload: Workload
    info: PodInfo


def jobj(value: object, where: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def jlist(value: object, where: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _str(value: object, where: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise PodError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def parse_time(value: object, where: str) -> float:
    """RFC 3339 (`2024-05-01T10:00:00Z`) → wall-clock seconds."""
    text = _str(value, where)
    if len(text) > 40 or not _RFC3339.fullmatch(text):
        raise PodError(f"{where}: not an RFC 3339 time: {text[:40]!r}")
    frac = re.search(r"\.(\d+)", text)
    if frac and len(frac.group(1)) > 6:  # Python takes at most microseconds
        text = text.replace(frac.group(0), "." + frac.group(1)[:6])
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as err:
        raise PodError(f"{where}: not an RFC 3339 time: {err}") from err


def amounts(resources: Mapping[str, object], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, conv in (("cpu", to_milli), ("memory", to_int), (BATCH_CPU, to_int), (BATCH_MEMORY, to_int)):
        if name in resources:
            try:
                v = conv(resources[name])
            except QuantityError as err:
                raise PodError(f"{where}.{name}: {err}") from err
            bound = MAX_POD_MILLI_CPU if name in ("cpu", BATCH_CPU) else MAX_POD_MEMORY_BYTES
            if not 0 <= v <= bound:
                raise PodError(f"{where}.{name}: {resources[name]!r} is out of range [0, {bound}]")
            out[name] = v
    return out


def _add(a: dict[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}


def _max(a: dict[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b)}


def _pod_resources(spec: Mapping[str, object], where: str) -> tuple[dict[str, int], dict[str, int], Tier]:
    """Effective pod requests and limits (Kubernetes rules: max(Σ containers + sidecars, any init) +
    overhead) and the QoS tier the requests and limits imply."""
    containers = jlist(spec.get("containers"), f"{where}.spec.containers")
    inits = jlist(spec.get("initContainers"), f"{where}.spec.initContainers")
    if len(containers) + len(inits) > MAX_CONTAINERS:
        raise PodError(f"{where}: more than {MAX_CONTAINERS} containers")
    req: dict[str, int] = {}
    lim: dict[str, int] = {}
    init_req: dict[str, int] = {}
    init_lim: dict[str, int] = {}
    guaranteed = True
    any_set = False
    for kind, items in (("containers", containers), ("initContainers", inits)):
        for i, c in enumerate(items):
            cw = f"{where}.spec.{kind}[{i}].resources"
            res = jobj(jobj(c, f"{where}.spec.{kind}[{i}]").get("resources"), cw)
            r = amounts(jobj(res.get("requests"), f"{cw}.requests"), f"{cw}.requests")
            lm = amounts(jobj(res.get("limits"), f"{cw}.limits"), f"{cw}.limits")
            r = {**{k: v for k, v in lm.items() if k in ("cpu", "memory")}, **r}  # request defaults to limit
            for name in ("cpu", "memory"):
                if name in r or name in lm:
                    any_set = True
                if name not in lm or r.get(name) != lm.get(name):
                    guaranteed = False
            sidecar = kind == "initContainers" and jobj(c, cw).get("restartPolicy") == "Always"
            if kind == "containers" or sidecar:
                req, lim = _add(req, r), _add(lim, lm)
            else:
                init_req, init_lim = _max(init_req, r), _max(init_lim, lm)
    req, lim = _max(req, init_req), _max(lim, init_lim)
    overhead = amounts(jobj(spec.get("overhead"), f"{where}.spec.overhead"), f"{where}.spec.overhead")
    req, lim = _add(req, overhead), _add(lim, overhead)
    tier = Tier.BESTEFFORT if not any_set else Tier.GUARANTEED if guaranteed else Tier.BURSTABLE
    return req, lim, tier


def _annotations(meta: Mapping[str, object], where: str) -> dict[str, str]:
    raw = jobj(meta.get("annotations"), f"{where}.metadata.annotations")
    out: dict[str, str] = {}
    size = 0
    for k, v in raw.items():
        if not isinstance(v, str) or len(k) > 317:
            raise PodError(
                f"{where}: metadata.annotations: {k[:60]!r} is not a string key=value within limits")
        size += len(k.encode()) + len(v.encode())
        out[k] = v
    if size > MAX_ANNOTATION_BYTES:
        raise PodError(f"{where}: metadata.annotations: {size} bytes, more than {MAX_ANNOTATION_BYTES}")
    return out


def _owner_kinds(meta: Mapping[str, object], where: str) -> tuple[str, ...]:
    refs = jlist(meta.get("ownerReferences"), f"{where}.metadata.ownerReferences")
    if len(refs) > MAX_OWNER_REFERENCES:
        raise PodError(f"{where}: metadata.ownerReferences: more than {MAX_OWNER_REFERENCES}")
    kinds: list[str] = []
    for i, ref in enumerate(refs):
        at = f"{where}.metadata.ownerReferences[{i}]"
        kind = _str(jobj(ref, at).get("kind"), f"{at}.kind")
        if not kind or len(kind) > 63:
            raise PodError(f"{at}.kind: {kind[:60]!r} is not a kind")
        kinds.append(kind)
    return tuple(kinds)


def _identity(meta: Mapping[str, object]) -> tuple[str, str, str, str]:
    """Name, namespace, UID and the `pod <ns>/<name>` every later error starts with."""
    name = _str(meta.get("name"), "pod.metadata.name")
    if not _DNS_SUBDOMAIN.fullmatch(name):
        raise PodError(f"pod.metadata.name {name[:80]!r} is not a DNS-1123 name")
    namespace = _str(meta.get("namespace"), f"pod {name}: metadata.namespace")
    if not _DNS_LABEL.fullmatch(namespace):
        raise PodError(f"pod {name}: metadata.namespace {namespace[:80]!r} is not a DNS-1123 label")
    where = f"pod {namespace}/{name}"
    try:
        uid = check_pod_uid(meta.get("uid"))
    except IdError as err:
        raise PodError(f"{where}: metadata.uid: {err}") from err
    return name, namespace, uid, where


def _phase(status: Mapping[str, object], where: str) -> str:
    phase = _str(status.get("phase"), f"{where}.status.phase", "Pending")
    if phase not in _PHASES:
        raise PodError(f"{where}: status.phase {phase[:40]!r} is not a pod phase")
    return phase


def _labels(meta: Mapping[str, object], where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for k, v in jobj(meta.get("labels"), f"{where}.metadata.labels").items():
        if not isinstance(v, str) or len(k) > 317 or len(v) > 63:
            raise PodError(f"{where}: label {k[:60]!r} is not a string key=value within limits")
        labels[k] = v
    return labels


def _priority(spec: Mapping[str, object], where: str) -> int:
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise PodError(f"{where}: spec.priority {priority!r} is not an int32")
    return priority


def _qos_class(status: Mapping[str, object], where: str) -> str:
    """`status.qosClass` as the kubelet reports it; "" when absent."""
    qos_text = _str(status.get("qosClass"), f"{where}.status.qosClass", "")
    if qos_text and qos_text not in _K8S_QOS:
        raise PodError(f"{where}: status.qosClass {qos_text[:40]!r} is not a Kubernetes QoS class")
    return qos_text


def _koord_qos(labels: Mapping[str, str], where: str) -> str | None:
    koord = labels.get(KOORD_QOS_LABEL)
    if koord is not None and koord not in KOORD_QOS:
        raise PodError(f"{where}: label {KOORD_QOS_LABEL}={koord!r} is not one of {', '.join(KOORD_QOS)}")
    return koord


def koord_qos_class(koord_qos: str | None, k8s_qos: str) -> str:
    """Koordinator's QoS of a pod: its `koordinator.sh/qosClass` label, else from the Kubernetes class."""
    return koord_qos if koord_qos is not None else _QOS_FROM_K8S.get(k8s_qos, "")


def koord_priority_class(labels: Mapping[str, str], priority: int, qos: str) -> str:
    """Koordinator's priority class (apis/extension/priority.go): the `koordinator.sh/priority-class`
    label when present (an unknown value gives "", never the spec.priority range), else the range of
    spec.priority; "" then falls back to the QoS (SYSTEM/LSE/LSR/LS → koord-prod, BE → koord-batch)."""
    if KOORD_PRIORITY_LABEL in labels:
        label = labels[KOORD_PRIORITY_LABEL]
        found = label if label in KOORD_PRIORITY_CLASSES else ""
    else:
        found = next((name for name, low, high in _KOORD_PRIORITY_RANGES if low <= priority <= high), "")
    if found:
        return found
    if qos in ("SYSTEM", "LSE", "LSR", "LS"):
        return "koord-prod"
    return "koord-batch" if qos == "BE" else ""


def _is_be(koord: str | None, tier: Tier, protected_by: str | None, uid: str, where: str,
           conflicts: ConflictNotes | None, labels: Mapping[str, str] | None = None) -> bool:
    """BE by the Koordinator QoS label if there is one, else a `koordinator.sh/priority-class` label of
    koord-batch or koord-free makes it batch, else by the QoS tier; never when protected."""
    if protected_by is None:
        if koord is not None:
            return koord == "BE"
        if labels and labels.get(KOORD_PRIORITY_LABEL) in ("koord-batch", "koord-free"):
            return True
        return tier is Tier.BESTEFFORT
    if koord == "BE" and (_CONFLICTS if conflicts is None else conflicts).first_time(uid):
        log.warning("kubelet: pod %s is labelled %s=BE but is protected (%s): kept out of BE; "
                    "fix the label or the protection settings", where, KOORD_QOS_LABEL, protected_by)
    return False


def _times(meta: Mapping[str, object], status: Mapping[str, object], where: str) -> tuple[float, bool]:
    """When the pod started (0 if unknown) and whether it is being deleted."""
    started = status.get("startTime") or meta.get("creationTimestamp")
    started_at = parse_time(started, f"{where}.status.startTime") if started is not None else 0.0
    terminating = meta.get("deletionTimestamp") is not None
    if terminating:
        parse_time(meta.get("deletionTimestamp"), f"{where}.metadata.deletionTimestamp")
    return started_at, terminating


def _pod_ips(status: Mapping[str, object], where: str) -> tuple[str, ...]:
    ips: list[str] = []
    for i, entry in enumerate(jlist(status.get("podIPs"), f"{where}.status.podIPs")):
        at = f"{where}.status.podIPs[{i}]"
        ips.append(_str(jobj(entry, at).get("ip"), f"{at}.ip"))
    if not ips and status.get("podIP"):
        ips.append(_str(status.get("podIP"), f"{where}.status.podIP"))
    for ip in ips:
        try:
            ipaddress.ip_address(ip)
        except ValueError as err:
            raise PodError(f"{where}: pod IP {ip[:60]!r} is not an IP address") from err
    return tuple(ips)


def _container_ids(status: Mapping[str, object], where: str) -> tuple[str, ...]:
    cids: list[str] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for i, cs in enumerate(jlist(status.get(key), f"{where}.status.{key}")):
            cid = jobj(cs, f"{where}.status.{key}[{i}]").get("containerID")
            if cid:
                cids.append(_str(cid, f"{where}.status.{key}[{i}].containerID"))
    return tuple(cids)


def _summed(given: Mapping[str, int]) -> Resources:
    """Native and batch extended resources together (a BE pod asks for the latter)."""
    return Resources(given.get("cpu", 0) + given.get(BATCH_CPU, 0),
                     given.get("memory", 0) + given.get(BATCH_MEMORY, 0))


def status_ids(status: Mapping[str, object], where: str) -> dict[str, str]:
    """Container name -> runtime id (`containerd://<hex>`) from the pod's container statuses."""
    ids: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for i, cs in enumerate(jlist(status.get(key), f"{where}.status.{key}")):
            entry = jobj(cs, f"{where}.status.{key}[{i}]")
            cid, name = entry.get("containerID"), entry.get("name")
            if cid and isinstance(name, str):
                ids[name] = _str(cid, f"{where}.status.{key}[{i}].containerID")
    return ids


def _batch_amounts(c: Mapping[str, object], where: str) -> BatchAmounts | None:
    """A container's batch resources (None when it declares none: left out of the pod's sums)."""
    res = jobj(c.get("resources"), f"{where}.resources")
    req = amounts(jobj(res.get("requests"), f"{where}.resources.requests"), f"{where}.resources.requests")
    lim = amounts(jobj(res.get("limits"), f"{where}.resources.limits"), f"{where}.resources.limits")
    if not {BATCH_CPU, BATCH_MEMORY} & (req.keys() | lim.keys()):
        return None
    return BatchAmounts(req.get(BATCH_CPU), lim.get(BATCH_CPU), lim.get(BATCH_MEMORY))


def _batch_pod(spec: Mapping[str, object], status: Mapping[str, object], annotations: Mapping[str, str],
               layout: Layout, ident: tuple[str, str, Tier, str]) -> BatchPod:
    """What the batch limits (qos.batch_limits) need of a BE pod: each container's batch resources and its
    cgroup once the runtime has made it (a container id in its status)."""
    key, uid, tier, where = ident
    ids = status_ids(status, where)
    containers: list[BatchContainer] = []
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(jlist(spec.get(kind), f"{where}.spec.{kind}")):
            at = f"{where}.spec.{kind}[{i}]"
            entry = jobj(c, at)
            name = _str(entry.get("name"), f"{at}.name", "")
            cgroup = None
            if name in ids:
                try:
                    cgroup = layout.container(uid, tier, ids[name])
                except ValueError:
                    cgroup = None  # a runtime whose cgroups we cannot name: the pod's limits still hold it
            amounts = _batch_amounts(entry, at)
            containers.append(BatchContainer(name, cgroup, amounts, init=kind == "initContainers"))
    return BatchPod(key, where.removeprefix("pod "), layout.pod(uid, tier), tuple(containers),
                    annotations.get(EXTENDED_RESOURCE_SPEC))


def parse_pod(item: object, layout: Layout, protection: ProtectionConfig = DEFAULT_PROTECTION,
              conflicts: ConflictNotes | None = None) -> ParsedPod | None:
    """One PodList item → workload and pod info; None for pods that no longer hold resources
    (Succeeded / Failed). Raises PodError naming the pod and the field.

    A protected pod (`qos.protection`) is never BE, whatever its QoS class or Koordinator label; one that
    carries `koordinator.sh/qosClass: BE` as well is logged once per pod UID (in `conflicts`)."""
    pod = jobj(item, "pod")
    meta = jobj(pod.get("metadata"), "pod.metadata")
    name, namespace, uid, where = _identity(meta)
    spec = jobj(pod.get("spec"), f"{where}.spec")
    status = jobj(pod.get("status"), f"{where}.status")
    phase = _phase(status, where)
    if phase in ("Succeeded", "Failed"):
        return None
    labels = _labels(meta, where)
    priority = _priority(spec, where)
    req, lim, derived = _pod_resources(spec, where)
    qos_text = _qos_class(status, where)
    tier = _K8S_QOS[qos_text] if qos_text else derived
    koord = _koord_qos(labels, where)
    priority_class = _str(spec.get("priorityClassName"), f"{where}.spec.priorityClassName", "")
    annotations = _annotations(meta, where)
    facts = PodFacts(namespace=namespace, priority=priority, priority_class=priority_class,
                     annotations=annotations, owner_kinds=_owner_kinds(meta, where))
    protected_by = protection_reason(facts, protection)
    be = _is_be(koord, tier, protected_by, uid, where, conflicts, labels)
    started_at, terminating = _times(meta, status, where)
    ips = _pod_ips(status, where)
    cids = _container_ids(status, where)
    try:
        cgroup = layout.pod(uid, tier)
    except ValueError as err:
        raise PodError(f"{where}: {err}") from err
    requests = _summed(req)
    if requests.milli_cpu > MAX_POD_MILLI_CPU or requests.memory_bytes > MAX_POD_MEMORY_BYTES:
        raise PodError(f"{where}: total requests {requests} are out of range")
    batch = (_batch_pod(spec, status, annotations, layout, (f"k8s/{uid}", uid, tier, where))
             if koord == "BE" and protected_by is None else None)
    workload = Workload(
        key=f"k8s/{uid}", name=name, source=Source.K8S, tier=tier, be=be, priority=priority, cgroup=cgroup,
        requests=requests, started_at=started_at, namespace=namespace, terminating=terminating,
        protected=protected_by is not None)
    info = PodInfo(
        uid=uid, namespace=namespace, name=name, phase=phase, qos_class=qos_text or derived.name.title(),
        koord_qos=koord,
        priority_class=priority_class,
        host_network=spec.get("hostNetwork") is True, pod_ips=ips, container_ids=cids,
        labels=MappingProxyType(labels),
        batch_requests=Resources(req.get(BATCH_CPU, 0), req.get(BATCH_MEMORY, 0)),
        limits=_summed(lim),
        protected_by=protected_by or "",
        batch=batch)
    return ParsedPod(workload, info)


def parse_pod_list(doc: object, layout: Layout, protection: ProtectionConfig = DEFAULT_PROTECTION,
                   conflicts: ConflictNotes | None = None) -> tuple[list[ParsedPod], list[str]]:
    """A v1 PodList → the pods that parse, and one reason per pod that does not."""
    if not isinstance(doc, Mapping):
        raise PodListError(f"expected a PodList object, got {type(doc).__name__}")
    if doc.get("kind") != "PodList" or doc.get("apiVersion") != "v1":
        raise PodListError(
            f"expected kind PodList, apiVersion v1; got {doc.get('kind')!r}, {doc.get('apiVersion')!r}")
    items = doc.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise PodListError(f"items: expected a list, got {type(items).__name__}")
    pods: list[ParsedPod] = []
    rejected: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        try:
            parsed = parse_pod(item, layout, protection, conflicts)
        except PodError as err:
            rejected.append(f"items[{i}]: {err}")
            continue
        if parsed is None:
            continue
        if parsed.info.uid in seen:
            rejected.append(f"items[{i}]: duplicate pod UID {parsed.info.uid}")
            continue
        seen.add(parsed.info.uid)
        pods.append(parsed)
    return pods, rejected


class KubeletSource:
    """Pods of this node from the kubelet. `refresh()` fetches; `workloads()` returns the last good list."""

    name = "kubelet"

    def __init__(self, cfg: KubeletConfig, layout: Layout, *,
                 clock: Callable[[], float] = time.monotonic,
                 protection: ProtectionConfig = DEFAULT_PROTECTION) -> None:
        self.cfg = cfg
        self._layout = layout
        self._protection = protection
        self._conflicts = ConflictNotes()
        self._clock = clock
        self._fetcher = HttpFetcher(HttpEndpoint(
            base_url=cfg.url, timeout_s=cfg.timeout_s, max_body_bytes=cfg.max_body_bytes, ca_file=cfg.ca_file,
            insecure_skip_verify=cfg.insecure_skip_verify, token_file=cfg.token_file))
        self._fresh = Freshness("kubelet", cfg.stale_after_s, log, clock)
        self._pods: tuple[ParsedPod, ...] = ()
        self._rejected: tuple[str, ...] = ()
        self._warned: set[str] = set()
        self._last_attempt = -float("inf")
        self._resync = asyncio.Event()

    # --------------------------------------------------------------- fetching

    def _parse(self, doc: object) -> tuple[list[ParsedPod], list[str]]:
        return parse_pod_list(doc, self._layout, self._protection, self._conflicts)

    async def refresh(self) -> None:
        self._last_attempt = self._clock()
        self._resync.clear()
        try:  # fetch, decode and parse in one worker-thread call: the loop only gets the parsed pods
            pods, rejected = await self._fetcher.aget_parsed("/pods", self._parse)
        except FetchError as err:
            FETCH_ERRORS.inc(self.name, err.kind)
            self._fresh.failed(str(err), err.kind)
            return
        except PodListError as err:
            FETCH_ERRORS.inc(self.name, "garbage")
            self._fresh.failed(f"garbage: {self.cfg.url}/pods: not a PodList: {err}", "garbage")
            return
        if not pods:
            why = "empty pod list" if not rejected else f"no valid pod ({len(rejected)} rejected)"
            FETCH_ERRORS.inc(self.name, "empty")
            self._fresh.failed(f"empty: {self.cfg.url}/pods answered an {why} (kubelet restarting?)", "empty")
            self._note_rejected(rejected)
            return
        self._pods = tuple(pods)
        self._note_rejected(rejected)
        self._fresh.ok()

    def _note_rejected(self, rejected: list[str]) -> None:
        self._rejected = tuple(rejected)
        for reason in rejected:
            if reason not in self._warned:
                log.warning("kubelet: pod rejected: %s", reason)
        self._warned = set(rejected)

    def due(self) -> bool:
        """Whether a refresh is due: the resync period passed, or a resync was asked and the gap passed."""
        since = self._clock() - self._last_attempt
        return since >= self.cfg.resync_s or (self._resync.is_set() and since >= self.cfg.min_resync_gap_s)

    def request_resync(self) -> None:
        self._resync.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh every `resync_s`, or sooner on request (at most every `min_resync_gap_s`)."""
        while not stop.is_set():
            if self.due():
                await self.refresh()
            since = self._clock() - self._last_attempt
            waits = [asyncio.ensure_future(stop.wait())]
            if self._resync.is_set():
                timeout = self.cfg.min_resync_gap_s - since
            else:
                timeout = self.cfg.resync_s - since
                waits.append(asyncio.ensure_future(self._resync.wait()))
            _, pending = await asyncio.wait(
                waits, timeout=max(timeout, 0.001), return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()

    # --------------------------------------------------------------- reading

    def workloads(self) -> SourceResult:
        return SourceResult(
            workloads=tuple(p.workload for p in self._pods),
            stale_reason=self._fresh.stale_reason(),
            age_s=self._fresh.age_s(),
            pods=MappingProxyType({p.workload.key: p.info for p in self._pods}),
            rejected=self._rejected,
        )

    def pods(self) -> tuple[PodInfo, ...]:
        return tuple(p.info for p in self._pods)

    def batch_pods(self) -> tuple[BatchPod, ...]:
        """The pods labelled `koordinator.sh/qosClass: BE` (not protected) of the last good list."""
        return tuple(p.info.batch for p in self._pods if p.info.batch is not None)

    def find_pod(self, label_key: str, label_value: str) -> PodInfo | None:
        """The running, not terminating pod with this label (the newest if several)."""
        best: ParsedPod | None = None
        for p in self._pods:
            live = p.info.phase == "Running" and not p.workload.terminating
            if live and p.info.labels.get(label_key) == label_value and (
                    best is None or p.workload.started_at > best.workload.started_at):
                best = p
        return best.info if best else None
