"""`coloc-agent status` says where each NodeSLO-mappable policy setting comes from (the node's NodeSLO, the
agent's YAML, or its default where neither sets it) and its value in force. The process test runs a real
`coloc-agent run` on a private real cgroup root; the API server cannot run here, so a local HTTP server
(tests/kit/fakes/apiserver.py) serves the Node and the NodeSLO in the API server's JSON, and the real
`coloc-agent status` CLI asks the agent's socket."""

from __future__ import annotations

from pathlib import Path

from kit.agentproc import running_agent
from kit.fakes.apiserver import FakeApiServer, schema_errors
from kit.poll import wait
from kit.realcg import RealRoot
from koordslo_agent import NODESLO, nodeslo, settings, slo_agent_config, status, threshold_is

from agent.api import convert
from agent.api.coloc.v1 import agent_pb2 as pb
from agent.cli.status import render
from agent.sources.nodeslo_map import FIELDS, settings_sources
from qos.policies import PolicyConfig

FIX = Path(__file__).resolve().parent.parent / "fixtures"
RESYNC_S = 1.0
MAPPED = {f"{section}.{name}" for _, section, name in FIELDS}


def test_values_are_written_as_configured_and_render_names_value_and_source() -> None:
    sources = settings_sources(None) | {"suppression.threshold_percent": "NodeSLO"}
    rows = convert.settings_pb(PolicyConfig(), sources)
    got = {r.name: (r.value, r.source) for r in rows}
    assert set(got) == MAPPED
    assert [r.name for r in rows] == sorted(MAPPED)
    assert got["suppression.threshold_percent"] == ("65", "NodeSLO")  # 65.0 as the config writes it
    assert got["suppression.policy"] == ("cpuset", "default")
    assert got["cpu_eviction.window_s"] == ("10", "default")
    assert got["memory_eviction.lower_percent"] == ("", "default")  # unset: threshold_percent - 2
    assert convert.setting_value(0.5) == "0.5"
    text = render(pb.Status(settings=rows))
    block = text[text.index("settings"):].splitlines()
    assert block[0] == "settings"
    assert block[1:] == [f"  {r.name:40} {r.value or '-':10} {r.source}" for r in rows]


def test_status_reports_each_setting_from_nodeslo_or_yaml(real_root: RealRoot, tmp_path: Path) -> None:
    known: dict[tuple[str, str], str] = {}
    with FakeApiServer(FIX / "apiserver" / "node.json", known) as api:
        slo = nodeslo("7", enable=True, cpuSuppressThresholdPercent=30, cpuSuppressPolicy="cfsQuota",
                      cpuSuppressMinPercent=10, memoryEvictThresholdPercent=80)
        assert schema_errors("nodeslos", slo) == []
        api.koord[NODESLO] = slo
        # cpu_eviction.window_s: a YAML value that is not the default
        cfg = slo_agent_config(tmp_path, real_root.name, api.url, resync_s=RESYNC_S,
                               policies={"cpu_eviction": {"window_s": 15}})
        sock = tmp_path / "agent.sock"
        log = tmp_path / "agent.log"
        with running_agent(cfg, log):
            assert wait(threshold_is(sock, "30", "NodeSLO"), 30), (settings(sock), log.read_text()[-3000:])
            got = settings(sock)
            assert set(got) == MAPPED
            assert got["suppression.policy"] == ("cfsQuota", "NodeSLO")
            assert got["suppression.min_milli_cpu"] == ("200", "NodeSLO")  # 10 % of the node's 2 CPUs
            assert got["memory_eviction.threshold_percent"] == ("80", "NodeSLO")
            assert got["cpu_eviction.window_s"] == ("15", "yaml")
            assert got["memory_eviction.lower_percent"][1] == "default"  # nobody sets it
            code, text = status(sock, as_json=False)
            assert code == 0, text
            lines = text[text.index("\nsettings\n"):].splitlines()
            assert any(ln.split() == ["suppression.threshold_percent", "30", "NodeSLO"] for ln in lines), text
            assert any(ln.split() == ["cpu_eviction.window_s", "15", "yaml"] for ln in lines), text

            # A NodeSLO the settings refuse changes nothing (and says why in the log).
            api.koord[NODESLO] = nodeslo("8", enable=True, cpuSuppressThresholdPercent=150)
            assert wait(lambda: "the settings in force are kept" in log.read_text(), 10 * RESYNC_S), (
                log.read_text()[-3000:])
            assert "threshold_percent" in log.read_text().split("NodeSLO refused", 1)[-1]
            assert settings(sock) == got

            # enable: false (koord-manager's default): Koordinator's BE QoS is off, the YAML (and the defaults
            # of what it does not set) is in force.
            api.koord[NODESLO] = nodeslo("9", enable=False, cpuSuppressThresholdPercent=30)
            assert wait(threshold_is(sock, "65", "default"), 10 * RESYNC_S), settings(sock)
            back = settings(sock)
            assert {name for name, (_, src) in back.items() if src != "default"} == {"cpu_eviction.window_s"}
            assert back["suppression.policy"] == ("cpuset", "default")
            assert back["cpu_eviction.window_s"] == ("15", "yaml")

            # NodeSLO with the threshold again, then deleted (404): the YAML.
            api.koord[NODESLO] = nodeslo("10", enable=True, cpuSuppressThresholdPercent=45)
            assert wait(threshold_is(sock, "45", "NodeSLO"), 10 * RESYNC_S), settings(sock)
            del api.koord[NODESLO]
            assert wait(threshold_is(sock, "65", "default"), 10 * RESYNC_S), settings(sock)
