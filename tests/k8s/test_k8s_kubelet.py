"""The kubelet source: PodList parsing from checked-in payloads, and a real HTTP(S) client against a local
fake kubelet serving them (the kubelet itself cannot run here) — TLS with a chosen CA, the bearer token,
and outages: down, slow, trickling, garbage, truncated, HTTP 500, empty answers."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.kubelet import FakeKubelet
from kit.fakes.tls import TlsFiles
from kit.snapshot import node_snapshot

from agent.config.sources import KubeletConfig
from agent.sources.kubelet import KubeletSource, PodListError, parse_pod_list
from cgroups.layout import Layout
from qos.actions import Evict
from qos.batch import BatchConfig, BatchState, decide_batch
from qos.model import NodeSnapshot, Resources, Tier

GIB = 1 << 30
MIB = 1 << 20
UID = "0a1b2c3d-0000-4000-8000-00000000000{}"


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=UTC).timestamp()


def _load(fixtures: Path, name: str) -> object:
    return json.loads((fixtures / "kubelet" / name).read_text())


def test_mixed_podlist_maps_every_field(fixtures: Path) -> None:
    pods, rejected = parse_pod_list(_load(fixtures, "podlist-mixed.json"), Layout("cgroupfs"))
    assert rejected == []
    by_name = {p.info.name: p for p in pods}
    # The Succeeded job holds nothing any more and is not a workload.
    assert set(by_name) == {
        "spark-exec-1",
        "web-7d9f8c-x2x9z",
        "redis-0",
        "etl-job-5xk2p",
        "yarn-nm-0",
        "scratch",
        "kube-proxy-node-a",
    }

    spark = by_name["spark-exec-1"]
    w = spark.workload
    assert (w.key, w.namespace, w.tier, w.be, w.priority) == (
        f"k8s/{UID.format(1)}",
        "batch",
        Tier.BESTEFFORT,
        True,
        5500,
    )
    assert w.requests == Resources(2000, 4 * GIB)  # batch-cpu is milli-cores already; batch-memory bytes
    assert w.cgroup == f"besteffort/pod{UID.format(1)}"
    assert w.started_at == _ts("2024-05-01T10:00:01Z")
    assert not w.terminating
    assert spark.info.batch_requests == Resources(2000, 4 * GIB)
    assert spark.info.container_ids == (
        "containerd://4c5f3e2d1b0a99887766554433221100aabbccddeeff00112233445566778899",
    )
    assert spark.info.pod_ips == ("10.244.1.11",)
    assert (spark.info.phase, spark.info.koord_qos, spark.info.priority_class) == (
        "Running",
        "BE",
        "koord-batch",
    )

    web = by_name["web-7d9f8c-x2x9z"]
    # max(Σ containers = 600m / 1152Mi, init container 1500m / 256Mi), per resource
    assert web.workload.requests == Resources(1500, 1024 * MIB + 128 * MIB)
    assert (web.workload.tier, web.workload.be, web.workload.priority) == (Tier.BURSTABLE, False, 9500)
    assert web.info.pod_ips == ("10.244.1.12", "fd00:10:244:1::12")
    assert len(web.info.container_ids) == 3
    assert web.workload.cgroup == f"burstable/pod{UID.format(2)}"

    redis = by_name["redis-0"]
    assert (redis.workload.tier, redis.workload.be, redis.info.koord_qos) == (Tier.GUARANTEED, False, "LSR")
    assert redis.workload.cgroup == f"pod{UID.format(3)}"  # guaranteed pods sit in the root itself

    etl = by_name["etl-job-5xk2p"]
    assert etl.workload.terminating and etl.workload.be
    assert etl.workload.requests == Resources(1000, 2 * GIB)

    nm = by_name["yarn-nm-0"]
    assert nm.info.host_network and nm.info.labels["app.kubernetes.io/component"] == "node-manager"
    assert nm.workload.requests == Resources(1000, GIB)  # "1k" batch-cpu = 1000 milli-cores

    scratch = by_name["scratch"]  # no label, BestEffort: BE by its Kubernetes class; no startTime yet
    assert (scratch.workload.be, scratch.workload.requests, scratch.info.phase) == (
        True,
        Resources(),
        "Pending",
    )
    assert scratch.workload.started_at == _ts("2024-05-01T10:10:00Z")

    proxy = by_name["kube-proxy-node-a"]  # a static pod: its UID is the 32-hex config hash
    assert proxy.workload.key == "k8s/7f1c4a2e9d8b4c6a8e0f1a2b3c4d5e6f"
    assert proxy.workload.priority == 2000001000 and not proxy.workload.be


def test_systemd_driver_paths(fixtures: Path) -> None:
    pods, _ = parse_pod_list(_load(fixtures, "podlist-mixed.json"), Layout("systemd"))
    spark = next(p for p in pods if p.info.name == "spark-exec-1")
    uid = UID.format(1).replace("-", "_")
    assert spark.workload.cgroup == f"kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice"


def test_empty_node_parses_to_nothing(fixtures: Path) -> None:
    assert parse_pod_list(_load(fixtures, "podlist-empty.json"), Layout("cgroupfs")) == ([], [])


def test_hostile_pods_are_rejected_with_reasons_and_the_rest_kept(fixtures: Path) -> None:
    pods, rejected = parse_pod_list(_load(fixtures, "podlist-hostile.json"), Layout("cgroupfs"))
    assert [p.info.name for p in pods] == ["ok-pod"]
    text = "\n".join(rejected)
    assert len(rejected) == 9, text
    for needle in (
        "'../../../etc/passwd' is not a lower-case UID",
        "cpu: '1e30' is out of range",
        "memory: '-1Gi' is out of range",
        "'../escape' is not a DNS-1123 name",
        "batch-cpu: not a quantity: '12abc'",
        "'ROOT' is not one of",
        "batch-memory: '9Ei' is out of range",
        "'0A1B2C3D-0000-4000-8000-000000000018' is not",
        "spec.priority 'high' is not an int32",
    ):
        assert needle in text, needle
    # Nothing from a rejected pod reaches a cgroup path.
    assert all(".." not in p.workload.cgroup for p in pods)


def test_not_a_podlist_is_an_error() -> None:
    with pytest.raises(PodListError, match="expected kind PodList"):
        parse_pod_list({"kind": "Pod", "apiVersion": "v1"}, Layout("cgroupfs"))


# ------------------------------------------------------------------ against the fake kubelet


def _source(url: str, clock: FakeClock, tmp_path: Path, **kw: object) -> KubeletSource:
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    cfg = KubeletConfig(url=url, token_file=str(token), timeout_s=0.5, resync_s=1.0, stale_after_s=5.0, **kw)  # type: ignore[arg-type]
    return KubeletSource(cfg, Layout("cgroupfs"), clock=clock)


async def test_https_with_token_and_ca(
    fixtures: Path, tls_files: TlsFiles, clock: FakeClock, tmp_path: Path
) -> None:
    with FakeKubelet(
        fixtures / "kubelet" / "podlist-mixed.json", token="s3cr3t-token", tls=(tls_files.cert, tls_files.key)
    ) as kubelet:
        src = _source(kubelet.url, clock, tmp_path, ca_file=tls_files.ca)
        await src.refresh()
        res = src.workloads()
        assert res.stale_reason is None and res.age_s == 0.0
        assert len(res.workloads) == 7
        assert res.pods[f"k8s/{UID.format(1)}"].name == "spark-exec-1"
        assert kubelet.seen("GET", "/pods")[0].headers["authorization"] == "Bearer s3cr3t-token"
        assert src.find_pod("app.kubernetes.io/component", "node-manager").name == "yarn-nm-0"  # type: ignore[union-attr]


async def test_untrusted_certificate_is_refused(
    fixtures: Path, tls_files: TlsFiles, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeKubelet(
        fixtures / "kubelet" / "podlist-mixed.json", tls=(tls_files.cert, tls_files.key)
    ) as kubelet:
        src = _source(kubelet.url, clock, tmp_path, ca_file=tls_files.other_ca)
        with caplog.at_level(logging.WARNING, "coloc.sources.kubelet"):
            await src.refresh()
        res = src.workloads()
        assert res.workloads == ()
        assert (
            res.stale_reason is not None
            and "tls" in res.stale_reason
            and "no good answer" in res.stale_reason
        )
        assert any("TLS failed" in r.getMessage() for r in caplog.records)


async def test_wrong_token_gives_no_data(fixtures: Path, clock: FakeClock, tmp_path: Path) -> None:
    with FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json", token="another") as kubelet:
        src = _source(kubelet.url, clock, tmp_path)
        await src.refresh()
        reason = src.workloads().stale_reason
        assert reason is not None and "HTTP 401" in reason


def _stale_snapshot(stale: dict[str, str]) -> NodeSnapshot:
    from qos.model import Source, Workload

    ws = (
        Workload(
            "k8s/a", "a", Source.K8S, Tier.BESTEFFORT, True, 5000, "besteffort/poda", Resources(9000, 0)
        ),
    )
    return node_snapshot(ws, cpus=(0, 1), stale=stale)


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("down", "down:"),
        ("slow", "timeout:"),
        ("trickle", "timeout:"),
        ("garbage", "garbage:"),
        ("truncated", "truncated:"),
        ("error500", "HTTP 500"),
        ("empty", "empty body"),
        ("empty-list", "empty:"),
    ],
)
async def test_outage_keeps_last_good_then_goes_stale_then_recovers(
    mode: str, expect: str, fixtures: Path, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet = FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json").start()
    try:
        src = _source(kubelet.url, clock, tmp_path)
        await src.refresh()
        good = src.workloads()
        assert good.stale_reason is None and len(good.workloads) == 7

        if mode == "down":
            kubelet.stop()
        elif mode == "empty-list":
            kubelet.serve(fixtures / "kubelet" / "podlist-empty.json")
        else:
            kubelet.mode = mode
        clock.advance(1.0)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, "coloc.sources.kubelet"):
            await src.refresh()
        assert time.monotonic() - started < 2.0  # bounded by the 0.5 s timeout, whatever the server does
        lines = [r.getMessage() for r in caplog.records if r.name == "coloc.sources.kubelet"]
        assert len(lines) == 1 and expect in lines[0], lines
        assert "keeping the last good data" in lines[0]

        kept = src.workloads()
        assert kept.workloads == good.workloads and kept.stale_reason is None  # within the bound

        clock.advance(5.0)
        await src.refresh()
        stale = src.workloads()
        assert stale.workloads == good.workloads
        assert stale.stale_reason is not None and "old (bound 5s)" in stale.stale_reason
        assert expect in stale.stale_reason
        # Stale data forbids eviction: the ledger holds instead of evicting.
        actions, _ = decide_batch(
            dataclasses.replace(_stale_snapshot({"kubelet": stale.stale_reason}),
                                origin_annotation='{"resources":{"kubernetes.io/batch-cpu":"1000"}}'),
            BatchConfig(),
            BatchState(),
        )
        assert not any(isinstance(a, Evict) for a in actions)

        if mode == "down":
            kubelet.start()  # same port
        elif mode == "empty-list":
            kubelet.serve(fixtures / "kubelet" / "podlist-mixed.json")
        kubelet.mode = "ok"
        caplog.clear()
        with caplog.at_level(logging.INFO, "coloc.sources.kubelet"):
            await src.refresh()
        back = src.workloads()
        assert back.stale_reason is None and back.age_s == 0.0 and len(back.workloads) == 7
        assert any("answering again" in r.getMessage() for r in caplog.records)
    finally:
        kubelet.stop()


async def test_never_answered_is_stale(clock: FakeClock, tmp_path: Path) -> None:
    src = _source("http://127.0.0.1:9", clock, tmp_path)
    assert src.workloads().stale_reason == "kubelet: no good answer yet"
    await src.refresh()
    res = src.workloads()
    assert res.workloads == () and res.stale_reason is not None and "down:" in res.stale_reason


async def test_resync_schedule_and_requested_resync(fixtures: Path, clock: FakeClock, tmp_path: Path) -> None:
    with FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json") as kubelet:
        src = _source(kubelet.url, clock, tmp_path, min_resync_gap_s=0.2)
        assert src.due()
        await src.refresh()
        assert not src.due()
        src.request_resync()
        assert not src.due()  # asked, but within the minimum gap
        clock.advance(0.2)
        assert src.due()
        await src.refresh()
        clock.advance(0.5)
        assert not src.due()
        clock.advance(0.5)
        assert src.due()  # resync_s passed


async def test_run_refreshes_at_once_on_request_and_stops(fixtures: Path, tmp_path: Path) -> None:
    import asyncio

    with FakeKubelet(fixtures / "kubelet" / "podlist-mixed.json") as kubelet:
        cfg = KubeletConfig(
            url=kubelet.url,
            token_file="",
            timeout_s=0.5,
            resync_s=30,
            stale_after_s=60,
            min_resync_gap_s=0.05,
        )
        src = KubeletSource(cfg, Layout("cgroupfs"))
        stop = asyncio.Event()
        task = asyncio.create_task(src.run(stop))
        for _ in range(200):
            if kubelet.seen("GET", "/pods"):
                break
            await asyncio.sleep(0.01)
        assert len(kubelet.seen("GET", "/pods")) == 1 and src.workloads().stale_reason is None
        src.request_resync()  # e.g. a new pod cgroup appeared
        for _ in range(200):
            if len(kubelet.seen("GET", "/pods")) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(kubelet.seen("GET", "/pods")) == 2
        stop.set()
        await asyncio.wait_for(task, 2)
        assert len(kubelet.seen("GET", "/pods")) == 2  # nothing more until resync_s
