"""Who may call the node API: the socket decides (issue 24). The read socket serves reads to its group and
refuses every mutation; the admin socket (root, or an admin group) serves every method; TCP only with TLS
and client certificates, mutations for the named certificates.

A real server on real unix sockets; the callers are real processes that drop to another uid/gid before
connecting (peer_client.py), so the file modes and groups are what let them in or not. TLS uses
certificates made here with the openssl CLI.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from apiseckit import MUTATIONS, NOBODY, as_user, make_pki, serving

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.config.api import ApiConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
READ_ONLY = {"GetStatus": "OK", "Drain": "PERMISSION_DENIED"}

pytestmark = pytest.mark.skipif(not hasattr(__import__("os"), "getuid") or __import__("os").getuid() != 0,
                                reason="needs root to run callers as other users")


async def test_a_read_group_member_may_read_but_mutate_on_no_socket_it_can_open(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coloc.api.audit")
    async with serving(socket_group=str(NOBODY), socket_mode=0o660) as s:
        codes = await as_user(s.socket, NOBODY, NOBODY)
        assert codes["GetSnapshot"] == "OK" and codes["GetStatus"] == "OK", codes
        for m in MUTATIONS:
            assert codes[m] == "PERMISSION_DENIED", codes
        admin = await as_user(s.admin_socket, NOBODY, NOBODY)  # 0600 root: connect(2) refused
        assert set(admin.values()) == {"UNAVAILABLE"}, admin
        assert s.ledger.node.highest_epoch == 0  # nothing changed, not even the fence
        assert s.ledger.node.lifecycle.value == "RECOVERING"
        assert s.server.policy.denied == len(MUTATIONS)
        denied = [r.getMessage() for r in caplog.records if r.getMessage().startswith("denied Admit")]
        assert denied and f"read socket {s.socket}" in denied[0] and "'peer-test'" in denied[0]


async def test_root_on_the_read_socket_may_not_mutate_either() -> None:
    async with serving() as s:
        codes = await as_user(s.socket, 0, 0)
        assert codes["GetStatus"] == "OK" and all(codes[m] == "PERMISSION_DENIED" for m in MUTATIONS), codes
        assert s.ledger.node.highest_epoch == 0


async def test_root_on_the_admin_socket_may_mutate_and_is_audited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coloc.api.audit")
    async with serving(socket_group=str(NOBODY), socket_mode=0o660) as s:
        mode = os.stat(s.admin_socket).st_mode
        assert stat.S_IMODE(mode) == 0o600 and os.stat(s.admin_socket).st_uid == 0
        codes = await as_user(s.admin_socket, 0, 0)
        assert all(codes[m] != "PERMISSION_DENIED" for m in MUTATIONS), codes
        assert codes["GetSnapshot"] == "OK" and codes["GetStatus"] == "OK", codes
        assert s.ledger.node.highest_epoch == 7  # the fence of the allowed calls was taken
        allowed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Admit by")]
        assert allowed and f"admin socket {s.admin_socket}" in allowed[0]


async def test_an_admin_group_may_mutate_through_the_admin_socket() -> None:
    async with serving(socket_group=str(NOBODY), socket_mode=0o660, admin_socket_group=str(NOBODY - 1),
                       admin_socket_mode=0o660) as s:
        assert stat.S_IMODE(os.stat(s.dir).st_mode) == 0o755  # both groups reach their sockets
        codes = await as_user(s.admin_socket, NOBODY - 1, NOBODY - 1)
        assert all(codes[m] != "PERMISSION_DENIED" for m in MUTATIONS), codes
        assert s.ledger.node.highest_epoch == 7
        reader = await as_user(s.admin_socket, NOBODY, NOBODY)  # the read group is not the admin group
        assert set(reader.values()) == {"UNAVAILABLE"}, reader


async def test_a_peer_outside_the_socket_group_cannot_even_read() -> None:
    async with serving(socket_group=str(NOBODY), socket_mode=0o660) as s:
        codes = await as_user(s.socket, NOBODY - 1, NOBODY - 1)
        assert codes["GetSnapshot"] == "UNAVAILABLE", codes  # connect(2) refused by the file's mode


def test_tcp_without_tls_and_client_certificates_is_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"api.tcp_address: 0.0.0.0:7443 \(not a loopback address\) is "
                                         r"served only with TLS and required client certificates"):
        ApiConfig(tcp_address="0.0.0.0:7443")
    with pytest.raises(ValueError, match=r"api.tcp_address: 127.0.0.1:7443 \(a loopback address\)"):
        ApiConfig(tcp_address="127.0.0.1:7443", tls_cert_file="/c.pem", tls_key_file="/k.pem")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("node:\n  name: sec-node\napi:\n  socket_path: null\n  tcp_address: '0.0.0.0:0'\n")
    run = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(cfg)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "api.tcp_address" in run.stderr and "TLS" in run.stderr
    assert "Traceback" not in run.stderr


async def _call(address: str, d: Path, client: str | None) -> dict[str, str]:
    creds = grpc.ssl_channel_credentials(
        (d / "ca.pem").read_bytes(),
        (d / f"{client}.key").read_bytes() if client else None,
        (d / f"{client}.pem").read_bytes() if client else None)
    out: dict[str, str] = {}
    async with grpc.aio.secure_channel(address, creds) as ch:
        stub = pb_grpc.NodeAgentStub(ch)
        fence = pb.Fence(scheduler_id="tls-test", scheduler_epoch=9)
        for name, call in (("GetStatus", stub.GetStatus(pb.GetStatusRequest(), timeout=5)),
                           ("Drain", stub.Drain(pb.DrainRequest(fence=fence, mode=pb.DRAIN_MODE_GRACEFUL,
                                                                timeout_seconds=-1), timeout=5))):
            try:
                await call
                out[name] = "OK"
            except grpc.aio.AioRpcError as err:
                out[name] = err.code().name
    return out


async def test_tls_clients_read_and_only_named_certificates_mutate(tmp_path: Path) -> None:
    make_pki(tmp_path)
    tls = {"tcp_address": "127.0.0.1:0", "socket_path": None, "tls_cert_file": str(tmp_path / "server.pem"),
           "tls_key_file": str(tmp_path / "server.key"), "tls_client_ca_file": str(tmp_path / "ca.pem"),
           "tls_client_names": ("scheduler-1",)}
    async with serving(**tls) as s:
        address = s.server.address
        assert (await _call(address, tmp_path, "intruder")) == READ_ONLY
        assert (await _call(address, tmp_path, "stranger"))["GetStatus"] == "UNAVAILABLE"  # CA not trusted
        assert (await _call(address, tmp_path, None))["GetStatus"] == "UNAVAILABLE"  # no certificate at all
        assert s.ledger.node.highest_epoch == 0
        assert (await _call(address, tmp_path, "scheduler-1")) == {"GetStatus": "OK", "Drain": "OK"}
        assert s.ledger.node.highest_epoch == 9
    no_names = {k: v for k, v in tls.items() if k != "tls_client_names"}
    async with serving(**no_names) as s:  # no names configured: nobody mutates over TCP
        assert (await _call(s.server.address, tmp_path, "scheduler-1")) == READ_ONLY
        assert s.ledger.node.highest_epoch == 0
