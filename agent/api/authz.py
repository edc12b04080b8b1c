"""Who may call what: reads for everyone who can reach the API, mutations for configured callers only.

Unix socket: the caller is the peer's uid/gid/pid from SO_PEERCRED on the call's connection;
the socket's mode and group decide who may connect (and so read); mutations need a uid in
`api.mutate_uids` or a primary gid in `api.mutate_gids`. TCP: TLS always off loopback; mutations need a
verified client certificate (`api.tls_client_ca_file`), and its common name in `api.tls_client_names` when
that is set. Every mutation, allowed or not, is logged with the caller and the scheduler id.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.api.rpc import REASON_KEY, Call, Malformed, Status
from agent.config.api import ApiConfig

log = logging.getLogger("coloc.api.audit")

MUTATIONS = frozenset({"Admit", "AckRecovery", "Drain", "Recommission"})
_CRED = struct.Struct("3i")


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


class AccessPolicy:
    def __init__(self, cfg: ApiConfig) -> None:
        self._cfg = cfg
        self.denied = 0

    def caller(self, call: Call) -> Caller:
        sock = call.peer_socket()
        if sock is not None and sock.family == socket.AF_UNIX:
            pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
            return Caller("unix", uid, gid, pid)
        if call.transport_info("ssl_object") is not None:
            return Caller("tls", cert_name=_common_name(call.transport_info("peercert")))
        return Caller("tcp")

    def may_mutate(self, who: Caller) -> bool:
        cfg = self._cfg
        if who.transport == "unix" and who.uid is not None:
            return who.uid in cfg.mutate_uids or who.gid in cfg.mutate_gids
        if who.transport == "tls" and who.cert_name is not None and cfg.tls_client_ca_file:
            return not cfg.tls_client_names or who.cert_name in cfg.tls_client_names
        return False

    def guard(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """`behaviour` for callers allowed to mutate; PERMISSION_DENIED for the others; audited either way."""
        async def guarded(request: Any, call: Call) -> Any:
            who = self.caller(call)
            scheduler = request.fence.scheduler_id if request.HasField("fence") else ""
            fields = {"method": method, "caller": who.describe(), "uid": who.uid, "pid": who.pid,
                      "certificate": who.cert_name, "scheduler_id": scheduler}
            if not self.may_mutate(who):
                self.denied += 1
                log.warning("denied %s from %s (scheduler %r)", method, who.describe(), scheduler,
                            extra={"fields": {**fields, "allowed": False}})
                call.set_trailing_metadata(((REASON_KEY, "permission_denied"),))
                await call.abort(Status.PERMISSION_DENIED,
                                 f"{method}: {who.describe()} may not change this agent's state "
                                 "(api.mutate_uids / api.mutate_gids, or a TLS client certificate)")
            log.info("%s by %s (scheduler %r)", method, who.describe(), scheduler,
                     extra={"fields": {**fields, "allowed": True}})
            if isinstance(request, Malformed):  # parsed only for callers that may mutate
                await request.refuse(call)
            return await behaviour(request, call)
        return guarded


def _common_name(cert: dict[str, Any] | None) -> str | None:
    """The subject's CN of a certificate the TLS handshake verified (empty when none was asked for)."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
