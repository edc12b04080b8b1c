"""The node's Koordinator NodeSLO (`slo.koordinator.sh/v1alpha1`, named after the node), read by a periodic
GET, mapped onto the policy settings; the YAML config is the fallback for every setting it does not give.

`spec.resourceUsedThresholdWithBE` (koordinator v1.8.0 `ResourceThresholdStrategy`) → settings:
`cpuSuppressThresholdPercent` → suppression.threshold_percent; `cpuSuppressPolicy` → suppression.policy;
`cpuSuppressMinPercent` → suppression.min_milli_cpu (of the node's capacity); `memoryEvictThresholdPercent`
/ `memoryEvictLowerPercent` → memory_eviction.threshold_percent / lower_percent;
`cpuEvictBESatisfactionUpperPercent` and `…LowerPercent` (both, or neither: koordlet runs nothing with one)
→ cpu_eviction.satisfaction_upper/lower_percent; `cpuEvictBEUsageThresholdPercent` →
cpu_eviction.be_usage_threshold_percent; `cpuEvictTimeWindowSeconds` → cpu_eviction.window_s.
`enable: false` (koord-manager's default) means Koordinator's BE QoS is off: the YAML stays in force.
A NodeSLO the settings refuse is logged and changes nothing.

`spec.resourceQOSStrategy` (each class's `memoryQOS`) → memory QoS, `spec.cpuBurstStrategy` → CPU burst
(`nodeslo_map.apply_resource_qos`), each where the NodeSLO gives it, else the YAML's `resource_qos:`.

`spec.resourceQOSStrategy.{lsr,ls,be,system}Class.blkioQOS` and `cgroupRoot.blkioQOS` (koordlet's
`BlkIOQOSCfg`: `enable`, `blocks` of `{name, type: device | podvolume | volumegroup, ioCfg}`) → disk QoS
(`ResourceQos.blkio`, `qos/blkio_qos.py`) where the NodeSLO gives `resourceQOSStrategy`; the YAML gives none.
A class without it is koord-manager's default: off, no blocks. The BE class's `device` blocks, while its
`enable` is true: `ioCfg.readBPS` / `writeBPS` / `readIOPS` / `writeIOPS` → static caps of the BE tier on that
device (`blkio_qos.be_device_caps`; 0 or absent: no cap, as koordlet). Read, checked and named as not acted
on (`blkio_qos.unsupported`): `podvolume` and `volumegroup` blocks, `ioWeightPercent` other than 100,
the latencies, their percentiles and the user cost model (koordlet reads those under `cgroupRoot` only), and
the LSR, LS, system and `cgroupRoot` blocks. Every field is held to the CRD's bounds (a latency to ≥ 0, as
koordlet's validator); a device block's `name` must be a path under /dev/; an unknown `type`, a missing
`name` or a bad field refuses the NodeSLO's resource QoS as a whole, naming the field (memory QoS, CPU burst
and disk QoS in force are kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client
from urllib3.exceptions import HTTPError

from agent.config.sources import NodeSloConfig
from agent.sources.kubeapi import ApiBodyError, get_cluster_object
from agent.sources.nodeslo_map import (
    NODESLO,
    NodeSloError,
    apply_nodeslo,
    apply_resource_qos,
)
from agent.sources.settings import SettingsInForce
from qos.model import Resources

log = logging.getLogger("coloc.sources.nodeslo")

GROUP, VERSION, PLURAL = "slo.koordinator.sh", "v1alpha1", "nodeslos"
FETCH_FAILED = object()


class NodeSloSource:
    """GETs `nodeslos/<node>` every `resync_s`; puts the settings it maps in force (`settings`)."""

    def __init__(
        self,
        cfg: NodeSloConfig,
        api_client: client.ApiClient,
        node_name: str,
        capacity: Resources,
        settings: SettingsInForce,
        *,
        max_body_bytes: int = 1 << 20,
    ) -> None:
        from kubernetes import client  # lazy: docs/dependencies.md
        self.cfg = cfg
        self._api = client.CustomObjectsApi(api_client)
        self._node = node_name
        self._capacity = capacity
        self._max_body = max_body_bytes
        self.settings = settings

    def fetch(self) -> object | None:
        """Blocking GET; None when there is no NodeSLO (404), FETCH_FAILED when it cannot be read (logged:
        the settings in force are kept)."""
        from kubernetes.client.exceptions import ApiException  # lazy: docs/dependencies.md
        try:
            return get_cluster_object(self._api, (GROUP, VERSION, PLURAL), self._node, self.cfg.timeout_s,
                                      self._max_body, f"GET nodeslo {self._node}")
        except ApiException as err:
            if err.status == 404:
                return None
            log.warning("could not read NodeSLO %s: HTTP %s %s", self._node, err.status, err.reason)
        except ApiBodyError as err:
            log.warning("could not read NodeSLO %s: %s", self._node, err)
        except (HTTPError, OSError) as err:
            log.warning("could not read NodeSLO %s: API server unreachable: %s", self._node, err)
        return FETCH_FAILED

    def update(self, doc: object | None) -> bool:
        """Apply a NodeSLO (None: none there, the YAML is in force); whether the settings changed."""
        self.settings.read()
        qos_changed = self._update_resource_qos(doc)
        base = self.settings.yaml
        try:
            new, sources = (apply_nodeslo(base, doc, self._capacity, self.settings.yaml_sources)
                            if doc is not None else (base, dict(self.settings.yaml_sources)))
        except NodeSloError as err:
            log.error("%s; the settings in force are kept", err)
            return qos_changed
        if new == self.settings.policies and sources == self.settings.sources:
            return qos_changed
        self.settings.use(new, sources)
        log.info(
            "policy settings from %s",
            ", ".join(f"{k}={v}" for k, v in sorted(sources.items()) if v == NODESLO)
            or "the YAML config only",
        )
        return True

    def _update_resource_qos(self, doc: object | None) -> bool:
        """Memory QoS and CPU burst from this NodeSLO (the YAML's where it gives none); a refused part keeps
        what is in force."""
        try:
            new = apply_resource_qos(self.settings.yaml_resource_qos, doc)
        except NodeSloError as err:
            log.error("%s; memory QoS and CPU burst in force are kept", err)
            return False
        if new == self.settings.resource_qos:
            return False
        self.settings.use_resource_qos(new)
        log.info("memory QoS from %s, CPU burst from %s", new.memory_source, new.burst_source)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                doc = await asyncio.to_thread(self.fetch)
                if doc is not FETCH_FAILED:
                    self.update(doc)
            except Exception:
                log.exception("NodeSLO refresh failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.cfg.resync_s)
