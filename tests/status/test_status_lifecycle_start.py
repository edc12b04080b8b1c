"""The lifecycle start rule: a node that waits for a central scheduler starts RECOVERING, one configured
without a scheduler starts SCHEDULABLE, and a decommission survives a restart either way. Real ledgers
with real state files in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kit.snapshot import node_snapshot

from agent.config.agent import ConfigError, StateConfig, load_config
from agent.state import lifecycle
from agent.state.ledger import Ledger, LedgerConfig
from agent.state.lifecycle import Trigger
from agent.state.records import AdmitRequest, DrainStatus, Lifecycle, NodeRecord
from qos.model import Resources, Source

R, S = Lifecycle.RECOVERING, Lifecycle.SCHEDULABLE
DING, DED = Lifecycle.DECOMMISSIONING, Lifecycle.DECOMMISSIONED
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(("persisted", "await_ack", "want"), [
    (None, True, R), (None, False, S),
    (S, True, R), (S, False, S), (R, False, S), (R, True, R),
    (DING, True, DING), (DING, False, DING), (DED, True, DED), (DED, False, DED),
])
def test_start_state(persisted: Lifecycle | None, await_ack: bool, want: Lifecycle) -> None:
    assert lifecycle.on_start(persisted, await_ack=await_ack) is want


def _budgeted(ledger: Ledger) -> Ledger:
    snap = node_snapshot(taken_at=1.0, capacity=Resources(2000, 2 << 30), cpus=(0, 1), stale={})
    ledger.sync(snap, Resources(1000, 1 << 30), 1.0)
    return ledger


REQ = AdmitRequest("local/besteffort/a", "app", Source.LOCAL, Resources(100, 1 << 20))


def test_a_ledger_without_a_scheduler_starts_schedulable_and_admits(tmp_path: Path) -> None:
    ledger = _budgeted(Ledger.open(LedgerConfig("n1", str(tmp_path / "s.json"), await_scheduler_ack=False),
                                   boot_id="b"))
    assert ledger.node.lifecycle is S
    r = ledger.admit(REQ, 1)
    assert r.accepted, r.message


def test_a_ledger_that_waits_refuses_until_acknowledged(tmp_path: Path) -> None:
    ledger = _budgeted(Ledger.open(LedgerConfig("n1", str(tmp_path / "s.json")), boot_id="b"))
    assert ledger.cfg.await_scheduler_ack and ledger.node.lifecycle is R
    r = ledger.admit(REQ, 1)
    assert not r.accepted and "AckRecovery" in r.message
    ledger.ack_recovery(1, ledger.revision)
    assert ledger.admit(REQ, 1).accepted


@pytest.mark.parametrize("await_ack", [True, False])
def test_a_decommissioning_node_restarts_decommissioning(tmp_path: Path, await_ack: bool) -> None:
    path = str(tmp_path / "s.json")
    first = Ledger.open(LedgerConfig("n1", path, await_scheduler_ack=await_ack), boot_id="b")
    first.transition(Trigger.DRAIN, 1, drain=DrainStatus(started_at=first.now(), deadline=None))
    first.save()
    again = Ledger.open(LedgerConfig("n1", path, await_scheduler_ack=await_ack), boot_id="b")
    assert again.node.lifecycle is DING
    again.transition(Trigger.FORCE_DECOMMISSION, 2)
    again.save()
    third = Ledger.open(LedgerConfig("n1", path, await_scheduler_ack=await_ack), boot_id="b")
    assert third.node.lifecycle is DED


def test_waiting_names_what_the_node_waits_for_and_since_when() -> None:
    node = NodeRecord("n1", lifecycle=R)
    what, since = lifecycle.waiting(node, incarnation_started=1000.0)
    assert "AckRecovery" in what and since == 1000.0
    draining = NodeRecord("n1", lifecycle=DING, drain=DrainStatus(started_at=1500.0))
    what, since = lifecycle.waiting(draining, incarnation_started=1000.0)
    assert "drain" in what and since == 1500.0
    assert lifecycle.waiting(NodeRecord("n1", lifecycle=S), incarnation_started=1000.0) == ("", 0.0)
    assert lifecycle.waiting(NodeRecord("n1", lifecycle=DED), incarnation_started=1000.0) == ("", 0.0)


def _load(tmp_path: Path, doc: dict[str, object]) -> bool:
    p = tmp_path / "agent.yaml"
    p.write_text(yaml.safe_dump(doc))
    cfg = load_config(p)
    return cfg.state.awaits_ack(cfg.sources.kubelet.enabled or cfg.sources.yarn.enabled)


def test_the_switch_defaults_to_the_configured_sources(tmp_path: Path) -> None:
    standalone = load_config(EXAMPLES / "standalone.yaml")
    assert standalone.state.await_scheduler_ack == "auto"
    cluster = standalone.sources.kubelet.enabled or standalone.sources.yarn.enabled
    assert not cluster and not standalone.state.awaits_ack(cluster)
    assert _load(tmp_path, {"sources": {"kubelet": {"url": "http://127.0.0.1:10255"}}}) is True
    assert _load(tmp_path, {"sources": {"yarn": {"url": "http://127.0.0.1:8042"}}}) is True
    assert _load(tmp_path, {}) is False
    assert _load(tmp_path, {"state": {"await_scheduler_ack": True}}) is True
    assert _load(tmp_path, {"state": {"await_scheduler_ack": False},
                            "sources": {"kubelet": {"url": "http://127.0.0.1:10255"}}}) is False


@pytest.mark.parametrize("bad", ["maybe", "", 1, [True]])
def test_a_bad_switch_is_refused_with_the_field_named(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match=r"state\.await_scheduler_ack"):
        _load(tmp_path, {"state": {"await_scheduler_ack": bad}})
    with pytest.raises(ConfigError, match=r"state\.await_scheduler_ack"):
        StateConfig(await_scheduler_ack=bad)  # type: ignore[arg-type]
