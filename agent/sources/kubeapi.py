"""A Kubernetes API client from in-cluster config, a kubeconfig, or a given Configuration (tests), and a
capped read of the answers the agent decodes itself (`_preload_content=False`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import urllib3

if TYPE_CHECKING:
    from kubernetes import client

from agent.config.sources import KubeApiConfig


class KubeApiError(RuntimeError):
    """The API client cannot be set up (no in-cluster environment, unreadable kubeconfig)."""


def make_api_client(cfg: KubeApiConfig,
                    configuration: client.Configuration | None = None) -> client.ApiClient:
    """In-cluster config when `cfg.kubeconfig` is empty, else that kubeconfig (and context)."""
    from kubernetes import client, config  # lazy: docs/dependencies.md
    from kubernetes.config.config_exception import ConfigException  # lazy: docs/dependencies.md
    if configuration is not None:
        return client.ApiClient(configuration)
    conf = client.Configuration()
    try:
        if cfg.kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=cfg.kubeconfig, context=cfg.context or None, client_configuration=conf)
        else:
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, TypeError, ValueError) as err:
        where = f"kubeconfig {cfg.kubeconfig}" if cfg.kubeconfig else "in-cluster config"
        raise KubeApiError(f"sources.kube_api: cannot load {where}: {err}") from err
    return client.ApiClient(conf)


class ApiBodyError(ValueError):
    """An API server answer over the cap or not the JSON object expected; `kind` too_large or garbage."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def read_capped(resp: urllib3.BaseHTTPResponse, cap: int, where: str) -> bytes:
    """The body of a `_preload_content=False` answer, at most `cap` bytes; the connection is released
    (or closed when the body was not read to its end). Over the cap: ApiBodyError before any decoding."""
    try:
        declared = resp.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ApiBodyError("too_large", f"{where}: Content-Length {declared} is over {cap} bytes")
        body = resp.read(cap + 1)
        if len(body) > cap:
            raise ApiBodyError("too_large", f"{where}: body larger than {cap} bytes")
        return body
    except ApiBodyError:
        resp.close()  # unread bytes left: never hand this connection back to the pool
        raise
    finally:
        resp.release_conn()


def read_capped_json(resp: urllib3.BaseHTTPResponse, cap: int, where: str) -> Mapping[str, object]:
    """`read_capped` decoded as one JSON object."""
    body = read_capped(resp, cap, where)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ApiBodyError("garbage", f"{where}: not JSON ({str(err)[:80]})") from err
    if not isinstance(doc, Mapping):
        raise ApiBodyError("garbage", f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def raw_response(resp: object) -> urllib3.BaseHTTPResponse:
    """With `_preload_content=False` the client returns the urllib3 response, whatever its annotation says."""
    if not isinstance(resp, urllib3.BaseHTTPResponse):
        raise TypeError(f"expected the raw urllib3 response, got {type(resp).__name__}")
    return resp


def get_cluster_object(api: object, gvp: tuple[str, str, str], name: str, timeout_s: float, cap: int,
                       where: str) -> Mapping[str, object]:
    """GET one cluster-scoped custom object (`gvp`: group, version, plural), read within `cap` bytes.
    Raises the client's ApiException (e.g. 404) or ApiBodyError."""
    group, version, plural = gvp
    resp = api.get_cluster_custom_object(  # type: ignore[attr-defined]
        group, version, plural, name, _request_timeout=timeout_s, _preload_content=False)
    return read_capped_json(raw_response(resp), cap, where)
