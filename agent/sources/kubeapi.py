"""A Kubernetes API client from in-cluster config, a kubeconfig, or a given Configuration (tests)."""

from __future__ import annotations

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from agent.sources.config import KubeApiConfig


class KubeApiError(RuntimeError):
    """The API client cannot be set up (no in-cluster environment, unreadable kubeconfig)."""


def make_api_client(cfg: KubeApiConfig,
                    configuration: client.Configuration | None = None) -> client.ApiClient:
    """In-cluster config when `cfg.kubeconfig` is empty, else that kubeconfig (and context)."""
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
