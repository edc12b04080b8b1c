"""Config of the Kubernetes and YARN side: kubelet, NodeManager, API server, node reporting.

Meant to be embedded in the agent's config under `sources:`; every error names the dotted field.
The YARN cgroup hierarchy name is not repeated here: it is `cgroups.yarn_hierarchy`, carried by the Layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from agent.config.load import ConfigError
from qos.validation import bounded, check_bounds, check_choices

SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_LABEL = re.compile(r"^[A-Za-z0-9./_-]{1,317}=[A-Za-z0-9._-]{0,63}$")


def _check_url(value: str, where: str, allow_empty: bool = False) -> None:
    if not value and allow_empty:
        return
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: expected an http(s)://host[:port] URL, got {value!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{where}: no query or fragment allowed, got {value!r}")
    try:
        _ = parts.port
    except ValueError as err:
        raise ConfigError(f"{where}: bad port in {value!r}") from err


def _check_timing(where: str, timeout_s: float, resync_s: float, stale_after_s: float) -> None:
    if stale_after_s < resync_s + timeout_s:
        raise ConfigError(
            f"{where}.stale_after_s: must be ≥ resync_s + timeout_s ({resync_s + timeout_s}), "
            f"got {stale_after_s}")


# The ranges the kubelet and NodeManager polls share: a GET's timeout, the period, how old the data may grow
# (and at least the two together), the body cap.
_TIMEOUT_S = (0.05, 60.0)
_RESYNC_S = (0.1, 600.0)
_STALE_AFTER_S = (0.15, 86_400.0)
_BODY_BYTES = (1024, 1 << 30)
_API_TIMEOUT_S = (0.1, 120.0)


@dataclass(frozen=True)
class KubeletConfig:
    """The kubelet's `/pods`: HTTPS :10250 with the service-account token, or the read-only port (HTTP).

    `ca_file` "" uses the system trust store; `insecure_skip_verify` accepts any certificate (the kubelet's
    self-signed serving cert, as koordlet does by default). `token_file` "" sends no token.
    """

    enabled: bool = True  # read pods from the kubelet
    url: str = "https://127.0.0.1:10250"  # the kubelet's base URL; its /pods is read
    ca_file: str = ""
    insecure_skip_verify: bool = False
    token_file: str = SA_TOKEN
    timeout_s: float = bounded(3.0, *_TIMEOUT_S)  # a GET's deadline
    resync_s: float = bounded(10.0, *_RESYNC_S)  # seconds between reads of the pod list
    # pods older than this are stale: nothing is evicted on them
    stale_after_s: float = bounded(35.0, *_STALE_AFTER_S)
    # a new pod cgroup the last list does not name asks for an early read, at most this often (≤ resync_s)
    min_resync_gap_s: float = bounded(0.2, 0.0, _RESYNC_S[1])
    # 250 pods × 16 KiB × 2 headroom (docs/sources.md, "Payload bounds")
    max_body_bytes: int = bounded(8 << 20, *_BODY_BYTES)

    def __post_init__(self) -> None:
        check_choices(self, "sources.kubelet", ConfigError)
        check_bounds(self, "sources.kubelet", ConfigError)
        _check_url(self.url, "sources.kubelet.url")
        _check_timing("sources.kubelet", self.timeout_s, self.resync_s, self.stale_after_s)
        if self.min_resync_gap_s > self.resync_s:
            raise ConfigError(
                f"sources.kubelet.min_resync_gap_s: must be in [0, resync_s], got {self.min_resync_gap_s}")
        if self.ca_file and self.insecure_skip_verify:
            raise ConfigError("sources.kubelet.insecure_skip_verify: cannot be set together with ca_file")


@dataclass(frozen=True)
class NodeManagerConfig:
    """The YARN NodeManager's REST API. `url` "" discovers it through the kubelet's pod list: the pod
    labelled `discovery_label`, `localhost:<port>` with hostNetwork, else `<pod IP>:<port>`."""

    enabled: bool = False  # read YARN containers from the NodeManager
    url: str = ""
    # key=value label of the NodeManager's pod, when url is ""
    discovery_label: str = "app.kubernetes.io/component=node-manager"
    port: int = bounded(8042, 1, 65535)  # the NodeManager's web port, when url is ""
    scheme: Literal["http", "https"] = "http"  # the scheme of a discovered NodeManager URL
    ca_file: str = ""  # CA bundle for an https NodeManager; "": the system trust store
    insecure_skip_verify: bool = False  # accept any certificate of an https NodeManager
    timeout_s: float = bounded(3.0, *_TIMEOUT_S)  # a GET's deadline
    resync_s: float = bounded(10.0, *_RESYNC_S)  # seconds between reads of the container list
    # containers older than this are stale: nothing is evicted on them
    stale_after_s: float = bounded(35.0, *_STALE_AFTER_S)
    # 2000 containers × 1 KiB × 2 headroom (docs/sources.md, "Payload bounds")
    max_body_bytes: int = bounded(4 << 20, *_BODY_BYTES)
    priority: int = bounded(5500, -(2**31), 2**31 - 1)  # an int32, as Kubernetes priorities are

    def __post_init__(self) -> None:
        check_choices(self, "sources.yarn", ConfigError)
        check_bounds(self, "sources.yarn", ConfigError)
        _check_url(self.url, "sources.yarn.url", allow_empty=True)
        _check_timing("sources.yarn", self.timeout_s, self.resync_s, self.stale_after_s)
        if not _LABEL.match(self.discovery_label):
            raise ConfigError(
                f"sources.yarn.discovery_label: expected key=value, got {self.discovery_label!r}")
        if self.ca_file and self.insecure_skip_verify:
            raise ConfigError("sources.yarn.insecure_skip_verify: cannot be set together with ca_file")

    @property
    def label_key(self) -> str:
        return self.discovery_label.split("=", 1)[0]

    @property
    def label_value(self) -> str:
        return self.discovery_label.split("=", 1)[1]


@dataclass(frozen=True)
class KubeApiConfig:
    """The API server (Eviction, Events, Node). `kubeconfig` "" means in-cluster config.

    `evicted_memory_s`: an evicted pod UID is not evicted again for this long. `evict_non_be` lets
    eviction touch pods that are not BE — off unless explicitly opted in. `max_body_bytes` caps the Node
    object the agent reads (and the one a patch answers with).
    """

    enabled: bool = True  # talk to the API server (evictions, Events, the Node)
    kubeconfig: str = ""
    context: str = ""  # the kubeconfig context; "": its current one
    timeout_s: float = bounded(5.0, *_API_TIMEOUT_S)  # a request's deadline
    evicted_memory_s: float = bounded(120.0, 0.0, 86_400.0)
    evict_non_be: bool = False
    event_component: str = "coloc-agent"  # the source component of the Events the agent posts
    # the Node we read: 256 KiB of annotations + status, × 4 (docs/sources.md)
    max_body_bytes: int = bounded(1 << 20, *_BODY_BYTES)

    def __post_init__(self) -> None:
        check_choices(self, "sources.kube_api", ConfigError)
        check_bounds(self, "sources.kube_api", ConfigError)
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,62}", self.event_component):
            raise ConfigError(f"sources.kube_api.event_component: not a DNS label: {self.event_component!r}")


@dataclass(frozen=True)
class ReportingConfig:
    """Reporting YARN's allocations back in `node.koordinator.sh/thirdPartyAllocations`.

    `mode`: "annotation" patches the Node; "off" does nothing. The patch goes out when the value changed
    or `resync_s` passed since the last successful one.
    """

    mode: Literal["annotation", "off"] = "annotation"
    # the annotation is patched again after this long, changed or not
    resync_s: float = bounded(300.0, 10.0, 86_400.0)
    # Not koord-yarn-operator's "hadoop-yarn": two writers must never share one entry.
    allocation_name: str = "coloc-agent-yarn"
    # the priority class of our entry
    priority_class: Literal["koord-prod", "koord-mid", "koord-batch", "koord-free"] = "koord-batch"
    # "always" writes our entry; "unless-operator" writes it only while no koord-yarn-operator entry
    # ("hadoop-yarn", `operator_entry`) is on the Node, and removes ours once one appears.
    yarn: Literal["always", "unless-operator"] = "always"
    operator_entry: str = "hadoop-yarn"  # the koord-yarn-operator's entry name
    max_conflict_retries: int = bounded(5, 1, 20)  # retries of a patch refused for a conflict

    def __post_init__(self) -> None:
        check_choices(self, "sources.reporting", ConfigError)
        check_bounds(self, "sources.reporting", ConfigError)
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,62}", self.allocation_name):
            raise ConfigError(f"sources.reporting.allocation_name: not a DNS label: {self.allocation_name!r}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,62}", self.operator_entry):
            raise ConfigError(f"sources.reporting.operator_entry: not a DNS label: {self.operator_entry!r}")
        if self.operator_entry == self.allocation_name:
            raise ConfigError(
                f"sources.reporting.allocation_name: {self.allocation_name!r} is the yarn-operator's entry "
                "(operator_entry); two writers on one entry undo each other")


@dataclass(frozen=True)
class NodeMetricConfig:
    """Writing Koordinator's NodeMetric status (`slo.koordinator.sh/v1alpha1`) from the agent's samples.

    The interval and windows come from the object's `spec.metricCollectPolicy`; `min_report_interval_s`
    and `min_aggregate_s` are koordlet's clamps (30 s, 60 s). No write goes out while the agent's own
    collection is stale or its last tick is older than `max_sample_age_s`: a fresh `updateTime` over old
    usage would make koord-manager trust it."""

    enabled: bool = False  # write the NodeMetric status (needs sources.kube_api)
    min_report_interval_s: float = bounded(30.0, 0.1, 3600.0)
    # the shortest aggregation window taken from the spec
    min_aggregate_s: float = bounded(60.0, 0.1, 86_400.0)
    max_sample_age_s: float = bounded(30.0, 1.0, 3600.0)  # no write while the last tick is older than this
    host_application: str = "hadoop-yarn"  # the hostApplications entry YARN's usage is reported under
    timeout_s: float = bounded(5.0, *_API_TIMEOUT_S)  # a request's deadline
    max_conflict_retries: int = bounded(5, 1, 20)  # retries of a write refused for a conflict

    def __post_init__(self) -> None:
        p = "sources.nodemetric"
        check_choices(self, p, ConfigError)
        check_bounds(self, p, ConfigError)
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,62}", self.host_application):
            raise ConfigError(f"{p}.host_application: not a DNS label: {self.host_application!r}")


@dataclass(frozen=True)
class NodeSloConfig:
    """Reading the node's Koordinator NodeSLO by a periodic GET every `resync_s` (see docs/koordinator.md
    for why not a watch). Its `resourceUsedThresholdWithBE` overrides the YAML policy settings it names;
    the YAML stays the fallback for the rest, and for all of them while no NodeSLO is read."""

    enabled: bool = False  # read the node's NodeSLO (needs sources.kube_api)
    resync_s: float = bounded(10.0, 0.1, 3600.0)  # seconds between GETs of the NodeSLO
    timeout_s: float = bounded(5.0, *_API_TIMEOUT_S)  # a GET's deadline

    def __post_init__(self) -> None:
        check_choices(self, "sources.nodeslo", ConfigError)
        check_bounds(self, "sources.nodeslo", ConfigError)


@dataclass(frozen=True)
class SourcesConfig:
    """The cluster's sources. A source is on when its section is in the file (naming only `yarn` turns on
    the NodeManager source alone); with no `sources:` section the agent runs standalone."""

    kubelet: KubeletConfig = field(default_factory=KubeletConfig)
    yarn: NodeManagerConfig = field(default_factory=NodeManagerConfig)
    kube_api: KubeApiConfig = field(default_factory=KubeApiConfig)
    reporting: ReportingConfig = field(default_factory=ReportingConfig)
    nodemetric: NodeMetricConfig = field(default_factory=NodeMetricConfig)
    nodeslo: NodeSloConfig = field(default_factory=NodeSloConfig)

    def __post_init__(self) -> None:
        for name in ("nodemetric", "nodeslo"):
            if getattr(self, name).enabled and not self.kube_api.enabled:
                raise ConfigError(f"sources.{name}.enabled: needs sources.kube_api.enabled")
        if self.yarn.enabled and not self.yarn.url and not self.kubelet.enabled:
            raise ConfigError(
                "sources.yarn.url: required when the kubelet source is off (nothing to discover from)")
        if self.reporting.mode == "annotation" and not self.kube_api.enabled:
            raise ConfigError("sources.reporting.mode: 'annotation' needs sources.kube_api.enabled")
