"""Issue 15: the API's access settings and the epoch clock bound are set from the agent's YAML.

Each setting is written into a YAML file, a real `coloc-agent run` process is started from it (private
cgroup root, state and socket in a temporary directory), and the setting is seen at work: callers are real
processes that drop to another uid/gid before connecting (peer_client.py), TLS clients use certificates
made with the openssl CLI (`make_pki`), epochs go through the real unix sockets.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from apiseckit import MUTATIONS, as_user, make_pki, short_dir
from kit.agentproc import agent_config, running_agent
from kit.ports import free_port
from kit.realcg import RealRoot

from agent.api.coloc.v1 import agent_pb2 as pb
from agent.api.coloc.v1 import agent_pb2_grpc as pb_grpc
from agent.config.agent import ConfigError, load_config

GROUP = 4242  # the read socket's group
ADMINS = 4244  # the admin socket's group
MUTATOR = 4243  # a member of the admin group
NOBODY = 65534

pytestmark = [pytest.mark.cgroups,
              pytest.mark.skipif(not hasattr(__import__("os"), "getuid") or __import__("os").getuid() != 0,
                                 reason="needs root to run callers as other users")]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    d = short_dir()  # a unix socket path must stay under 107 bytes
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _stub(address: str, creds: grpc.ChannelCredentials | None = None) -> tuple[grpc.aio.Channel,
                                                                                 pb_grpc.NodeAgentStub]:
    ch = grpc.aio.secure_channel(address, creds) if creds else grpc.aio.insecure_channel(address)
    return ch, pb_grpc.NodeAgentStub(ch)


def _admit(epoch: int, n: int) -> pb.AdmitRequest:
    return pb.AdmitRequest(fence=pb.Fence(scheduler_id="cfg-test", scheduler_epoch=epoch),
                           allocation=pb.AllocationSpec(key=f"local/batch/cfg-{n}", application_id=f"app-{n}",
                                                        source=pb.SOURCE_LOCAL,
                                                        resources=pb.Resources(milli_cpu=10,
                                                                               memory_bytes=1 << 20)))


async def _code(call: object) -> str:
    try:
        await call  # type: ignore[misc]
        return "OK"
    except grpc.aio.AioRpcError as err:
        return err.code().name


async def _tls_admit(address: str, d: Path, client: str, epoch: int) -> str:
    creds = grpc.ssl_channel_credentials((d / "ca.pem").read_bytes(), (d / f"{client}.key").read_bytes(),
                                         (d / f"{client}.pem").read_bytes())
    ch, stub = _stub(address, creds)
    async with ch:
        return await _code(stub.Admit(_admit(epoch, epoch), timeout=5))


async def _highest_epoch(sock: str) -> int:
    ch, stub = _stub(f"unix:{sock}")
    async with ch:
        status = await stub.GetStatus(pb.GetStatusRequest(), timeout=5)
    return int(status.node.highest_scheduler_epoch)


async def _serving(sock: str, log: Path, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if Path(sock).exists():
            ch, stub = _stub(f"unix:{sock}")
            async with ch:
                if await _code(stub.GetStatus(pb.GetStatusRequest(), timeout=1)) == "OK":
                    return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the agent did not serve {sock}:\n{log.read_text()[-2000:]}")


def _start(real_root: RealRoot, tmp_path: Path, sock_dir: Path, state: dict[str, object],
           api: dict[str, object]) -> Path:
    """The YAML file, as an operator writes it, checked through the agent's own loader."""
    cfg = agent_config(tmp_path, f"{real_root.name}/agent", free_port(), state=state,
                       api={"socket_path": str(sock_dir / "agent.sock"), **api})
    loaded = load_config(cfg)
    for key, value in state.items():
        assert getattr(loaded.state, key) == value
    return cfg


async def test_unix_tls_and_epoch_settings_from_yaml_reach_the_running_agent(
        real_root: RealRoot, tmp_path: Path, sock_dir: Path) -> None:
    make_pki(tmp_path)
    port = free_port()
    admin = str(sock_dir / "ops" / "admin.sock")
    cfg = _start(real_root, tmp_path, sock_dir, {"epoch_clock_skew_s": 60.0}, {
        "socket_group": str(GROUP), "socket_mode": 0o660, "admin_socket_path": admin,
        "admin_socket_group": str(ADMINS), "admin_socket_mode": 0o660,
        "tcp_address": f"127.0.0.1:{port}", "tls_cert_file": str(tmp_path / "server.pem"),
        "tls_key_file": str(tmp_path / "server.key"), "tls_client_ca_file": str(tmp_path / "ca.pem"),
        "tls_client_names": ["scheduler-1"]})
    sock = str(sock_dir / "agent.sock")
    with running_agent(cfg, tmp_path / "agent.log") as proc:
        await _serving(sock, tmp_path / "agent.log")
        # api.socket_group: the group reads and mutates nothing; api.admin_socket_*: the admin group mutates
        other = await as_user(sock, NOBODY, GROUP)
        assert other["GetStatus"] == "OK" and all(other[m] == "PERMISSION_DENIED" for m in MUTATIONS), other
        assert set((await as_user(admin, NOBODY, GROUP)).values()) == {"UNAVAILABLE"}
        listed = await as_user(admin, MUTATOR, ADMINS)
        assert all(listed[m] != "PERMISSION_DENIED" for m in MUTATIONS), listed
        assert await _highest_epoch(sock) == 7  # peer_client's fence, taken by the allowed caller
        assert not (sock_dir / "admin.sock").exists()  # the admin socket is where the YAML put it
        # TLS files, client CA and names: a certificate of the CA with another name reads only
        tcp = f"127.0.0.1:{port}"
        assert await _tls_admit(tcp, tmp_path, "intruder", 8) == "PERMISSION_DENIED"
        assert await _tls_admit(tcp, tmp_path, "stranger", 8) == "UNAVAILABLE"  # CA not trusted
        assert await _tls_admit(tcp, tmp_path, "scheduler-1", 9) == "OK"
        assert await _highest_epoch(sock) == 9
        # state.epoch_clock_skew_s 60: 120 s ahead is refused (the default 600 s would take it), 30 s taken
        now_ms = int(time.time() * 1000)
        ch, stub = _stub(f"unix:{admin}")
        async with ch:
            assert await _code(stub.Admit(_admit(now_ms + 120_000, 1), timeout=5)) == "INVALID_ARGUMENT"
            assert await _highest_epoch(sock) == 9
            assert await _code(stub.Admit(_admit(now_ms + 30_000, 2), timeout=5)) == "OK"
        assert await _highest_epoch(sock) == now_ms + 30_000
        assert proc.poll() is None


@pytest.mark.parametrize("key", ["mutate_uids", "mutate_gids", "max_connections"])
def test_a_grpclib_era_setting_is_refused_in_one_line_naming_what_replaced_it(tmp_path: Path,
                                                                              key: str) -> None:
    path = tmp_path / "agent.yaml"
    value = [0] if "mutate" in key else 9
    path.write_text(yaml.safe_dump({"node": {"name": "cfg-node"}, "api": {key: value}}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"agent.yaml: api.{key}: no longer a setting (" in text and "\n" not in text, text
    assert ("api.admin_socket" in text) if "mutate" in key else ("api.max_connection_idle_s" in text), text


@pytest.mark.parametrize(("section", "values", "message"), [
    ("state", {"epoch_clock_skew_s": -1}, "state.epoch_clock_skew_s: must be in [0, 86400]"),
    ("state", {"epoch_clock_skew_s": 86_401}, "state.epoch_clock_skew_s: must be in [0, 86400]"),
    ("state", {"epoch_clock_skew_s": "10m"}, "state.epoch_clock_skew_s: expected a finite number"),
    ("api", {"tls_client_names": [0]}, "api.tls_client_names[0]: expected a string"),
    ("api", {"admin_socket_mode": 0o660}, "api.admin_socket_mode: 0o660 gives the group access"),
    ("api", {"admin_socket_mode": 0o606}, "api.admin_socket_mode: must give others no access"),
    ("api", {"admin_socket_path": "/var/run/coloc-agent/agent.sock"}, "api.admin_socket_path: must differ"),
    ("api", {"admin_socket_path": "admin.sock"}, "api.admin_socket_path: must be absolute"),
    ("api", {"max_connection_idle_s": 0}, "api.max_connection_idle_s: must be in [1, 86400]"),
    ("api", {"handshake_timeout_s": 600}, "api.handshake_timeout_s: must be in [0.5, 120]"),
    ("api", {"keepalive_min_interval_s": 0.1}, "api.keepalive_min_interval_s: must be in [1, 3600]"),
    ("api", {"max_concurrent_streams": 0}, "api.max_concurrent_streams: must be in [1, 10000]"),
    ("api", {"tls_cert_file": "server.pem", "tls_key_file": "/k"}, "api.tls_cert_file: must be an absolute"),
    ("api", {"tls_cert_file": "/c"}, "api.tls_cert_file / api.tls_key_file: set both or neither"),
    ("api", {"tls_client_ca_file": "/ca"}, "api.tls_client_ca_file: needs api.tls_cert_file"),
    ("api", {"tls_client_names": ["a"]}, "api.tls_client_names: needs api.tls_client_ca_file"),
    ("api", {"tls_cert_file": "/c", "tls_key_file": "/k", "tls_client_ca_file": "/ca",
             "tls_client_names": ["x" * 65]}, "api.tls_client_names: each must be 1-64 characters"),
])
def test_a_bad_setting_is_refused_naming_the_field(tmp_path: Path, section: str, values: dict[str, object],
                                                   message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"node": {"name": "cfg-node"}, section: values}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value), str(err.value)
    assert len(str(err.value)) < 400
