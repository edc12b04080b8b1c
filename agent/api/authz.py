"""Who may call what: reads for everyone who can reach the API, mutations for configured callers only.

Unix socket: the caller is the peer's uid/gid/pid from SO_PEERCRED (recorded by `agent.api.peergate`);
the socket's mode and group decide who may connect (and so read); mutations need a uid in
`api.mutate_uids` or a primary gid in `api.mutate_gids`. TCP: TLS always off loopback; mutations need a
verified client certificate (`api.tls_client_ca_file`), and its common name in `api.tls_client_names` when
that is set. Every mutation, allowed or not, is logged with the caller and the scheduler id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import grpc

from agent.api.peergate import PeerGate
from agent.config.api import ApiConfig

log = logging.getLogger("coloc.api.audit")

SERVICE = "coloc.v1.NodeAgent"
MUTATIONS = frozenset({"Admit", "AckRecovery", "Drain", "Recommission"})
REASON_KEY = "coloc-reason"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a call, as far as the transport can tell."""

    transport: str  # "unix" | "tls" | "tcp"
    uid: int | None = None
    gid: int | None = None
    pid: int | None = None
    cert_name: str | None = None

    def describe(self) -> str:
        if self.uid is not None:
            return f"uid={self.uid} gid={self.gid} pid={self.pid}"
        if self.cert_name is not None:
            return f"certificate CN={self.cert_name}"
        return f"{self.transport} peer without credentials"


class AccessPolicy(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, cfg: ApiConfig, gate: PeerGate | None) -> None:
        self._cfg = cfg
        self.gate = gate
        self.denied = 0

    def caller(self, context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
        peer = context.peer() or ""
        if self.gate is not None and peer.startswith("unix"):
            cred = self.gate.cred_of(peer)
            if cred is not None:
                return Caller("unix", cred.uid, cred.gid, cred.pid)
            return Caller("unix")
        auth = context.auth_context()
        if auth.get("transport_security_type") == [b"ssl"]:
            names = list(auth.get("x509_common_name") or ())
            return Caller("tls", cert_name=names[0].decode(errors="replace") if names else None)
        return Caller("tcp")

    def may_mutate(self, who: Caller) -> bool:
        cfg = self._cfg
        if who.transport == "unix" and who.uid is not None:
            return who.uid in cfg.mutate_uids or who.gid in cfg.mutate_gids
        if who.transport == "tls" and who.cert_name is not None and cfg.tls_client_ca_file:
            return not cfg.tls_client_names or who.cert_name in cfg.tls_client_names
        return False

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
            handler_call_details: grpc.HandlerCallDetails) -> Handler:
        handler = await continuation(handler_call_details)
        service, _, method = handler_call_details.method.rpartition("/")
        if (handler is None or service != f"/{SERVICE}" or method not in MUTATIONS
                or handler.unary_unary is None):
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._guard(method, handler.unary_unary), request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    def _guard(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            who = self.caller(context)
            scheduler = request.fence.scheduler_id if request.HasField("fence") else ""
            fields = {"method": method, "caller": who.describe(), "uid": who.uid, "pid": who.pid,
                      "certificate": who.cert_name, "scheduler_id": scheduler}
            if not self.may_mutate(who):
                self.denied += 1
                log.warning("denied %s from %s (scheduler %r)", method, who.describe(), scheduler,
                            extra={"fields": {**fields, "allowed": False}})
                context.set_trailing_metadata(((REASON_KEY, "permission_denied"),))
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"{method}: {who.describe()} may not change this agent's state "
                                    "(api.mutate_uids / api.mutate_gids, or a TLS client certificate)")
            log.info("%s by %s (scheduler %r)", method, who.describe(), scheduler,
                     extra={"fields": {**fields, "allowed": True}})
            return await behaviour(request, context)
        return guarded
