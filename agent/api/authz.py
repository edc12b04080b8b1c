"""Who may call what, decided by where the call came in, as the kubelet and containerd do it.

- The read socket (`api.socket_path`): whoever can open it (its mode and group) may read; every mutation
  is refused with PERMISSION_DENIED, whoever asks.
- The admin socket (`api.admin_socket_path`, 0600 root or 0660 with an admin group): whoever can open it
  may call every method.
- TCP (TLS with required client certificates): reads for every client the CA signed; mutations only for a
  certificate whose common name is in `api.tls_client_names`, read from the call's auth context.

Every mutation, allowed or not, is logged with the listener, the caller as far as the transport tells, and
the scheduler id.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Any

from agent.api.rpc import REASON_KEY, Call, Malformed, Status
from agent.config.api import ApiConfig

log = logging.getLogger("coloc.api.audit")

MUTATIONS = frozenset({"Admit", "AckRecovery", "Drain", "Recommission", "Record"})


class Listener(enum.Enum):
    READ = "read socket"
    ADMIN = "admin socket"
    TCP = "TLS"


def cert_name(call: Call) -> str | None:
    """The verified client certificate's common name (gRPC core's auth context), if any."""
    auth = call.auth_context()
    if auth.get("transport_security_type") != [b"ssl"]:
        return None
    names = list(auth.get("x509_common_name") or ())
    return names[0].decode(errors="replace") if names else None


class AccessPolicy:
    def __init__(self, cfg: ApiConfig) -> None:
        self._cfg = cfg
        self.denied = 0

    def describe(self, listener: Listener, call: Call) -> str:
        if listener is Listener.TCP:
            name = cert_name(call)
            return f"certificate CN={name}" if name is not None else "TLS peer with no certificate name"
        path = self._cfg.admin_socket_path if listener is Listener.ADMIN else self._cfg.socket_path
        return f"{listener.value} {path}"

    def may_mutate(self, listener: Listener, call: Call) -> bool:
        if listener is Listener.ADMIN:
            return True
        if listener is Listener.TCP:
            name = cert_name(call)
            return name is not None and name in self._cfg.tls_client_names
        return False

    def guard(self, method: str, listener: Listener, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """`behaviour` where the listener allows changes, PERMISSION_DENIED elsewhere; audited either way."""
        async def guarded(request: Any, call: Call) -> Any:
            who = self.describe(listener, call)
            fence = getattr(request, "fence", None)
            scheduler = fence.scheduler_id if fence is not None and request.HasField("fence") else ""
            fields = {"method": method, "caller": who, "listener": listener.name.lower(),
                      "scheduler_id": scheduler}
            if not self.may_mutate(listener, call):
                self.denied += 1
                log.warning("denied %s from %s (scheduler %r)", method, who, scheduler,
                            extra={"fields": {**fields, "allowed": False}})
                call.set_trailing_metadata(((REASON_KEY, "permission_denied"),))
                await call.abort(Status.PERMISSION_DENIED, _denial(method, listener))
            log.info("%s by %s (scheduler %r)", method, who, scheduler,
                     extra={"fields": {**fields, "allowed": True}})
            if isinstance(request, Malformed):  # parsed only for callers that may mutate
                await request.refuse(call)
            return await behaviour(request, call)
        return guarded


def _denial(method: str, listener: Listener) -> str:
    if listener is Listener.READ:
        return (f"{method}: the read socket serves reads only; changes go through the admin socket "
                "(api.admin_socket_path)")
    return (f"{method}: this client certificate may not change this agent's state (its common name is not "
            "in api.tls_client_names)")
