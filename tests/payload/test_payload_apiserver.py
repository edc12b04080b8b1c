"""Capped reads of API-server answers. A local fake API server (a real one cannot run here) serves the
checked-in Node in the real v1 format, grown with `status.images` entries as a kubelet with
`nodeStatusMaxImages: -1` would report them, through the official client and the agent's reporter."""

from __future__ import annotations

import copy
import json
import logging

import pytest
from kit.fakes.apiserver import FakeApiServer
from kit.payload import FIX
from kubernetes import client

from agent.config.sources import KubeApiConfig, ReportingConfig
from agent.reporting.node_annotations import NodeReporter, ReportOutcome
from agent.sources.kubeapi import make_api_client
from qos.batch import ORIGIN_ANNOTATION
from qos.model import Resources


def _reporter(api: FakeApiServer, **kw: object) -> NodeReporter:
    conf = client.Configuration()
    conf.host = api.url
    return NodeReporter(ReportingConfig(), make_api_client(KubeApiConfig(), conf), "node-a",
                        **kw)  # type: ignore[arg-type]


def _grow(api: FakeApiServer, images: int) -> int:
    node = copy.deepcopy(api.node)
    node["status"]["images"] = [
        {"names": [f"registry.example.com/team/app-{i}@sha256:{i:064x}",
                   f"registry.example.com/team/app-{i}:v1"],
         "sizeBytes": 123456789} for i in range(images)]
    api.node = node
    return len(json.dumps(node))


def test_node_within_the_cap_is_read() -> None:
    with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        _grow(api, 50)  # the kubelet's default nodeStatusMaxImages
        read = _reporter(api).read()
    assert read is not None and read.origin == api.node["metadata"]["annotations"][ORIGIN_ANNOTATION]


def test_node_over_the_cap_is_not_decoded_and_read_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """A Node body over the default cap (1 MiB) gives None and a log line naming `too_large`; the next
    read of a normal Node on the same client works (the connection was not handed back half-read)."""
    with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        small = copy.deepcopy(api.node)
        size = _grow(api, 8000)
        assert size > KubeApiConfig().max_body_bytes
        rep = _reporter(api)
        with caplog.at_level(logging.WARNING, "coloc.reporting"):
            assert rep.read() is None
        assert any("too_large" in r.getMessage() for r in caplog.records), caplog.text
        api.node = small
        read = rep.read()
        assert read is not None and read.origin is not None
        # The patch answer (the whole Node) is not deserialized, and the patch is still applied.
        assert rep.report(Resources(3000, 1 << 30)) is ReportOutcome.PATCHED
        assert api.patches, "no PATCH reached the API server"


def test_configured_cap_applies() -> None:
    with FakeApiServer(FIX / "apiserver" / "node.json", {}) as api:
        size = len(json.dumps(api.node))
        assert _reporter(api, max_body_bytes=size + 64).read() is not None
        assert _reporter(api, max_body_bytes=size // 2).read() is None
