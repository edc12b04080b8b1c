"""Bounded, off-loop kubelet payloads. A local fake kubelet (the kubelet cannot run here) serves real v1
PodList bodies — many copies of the checked-in fixture pods — through the agent's real HTTP client."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from kit.fakes.kubelet import FakeKubelet
from kit.payload import FIX, podlist_body

from agent.config.sources import KubeletConfig
from agent.sources.fetch_errors import FETCH_ERRORS
from agent.sources.kubelet import KubeletSource, ParsedPod
from cgroups.layout import Layout

MIB = 1 << 20


def _source(url: str, **kw: object) -> KubeletSource:
    return KubeletSource(KubeletConfig(url=url, token_file="", timeout_s=10, resync_s=10,
                                       stale_after_s=30, **kw), Layout("cgroupfs"))  # type: ignore[arg-type]


def test_default_cap_is_sized_for_a_full_node() -> None:
    """250 pods (the usual max-pods bound) of the largest fixture pod ×8 (what real pods carry and the
    fixture leaves out) fit under the default, which is far below the 50 MB body that stalled the loop."""
    largest = max(len(json.dumps(p)) for p in json.loads(
        (FIX / "kubelet" / "podlist-mixed.json").read_text())["items"])
    cap = KubeletConfig().max_body_bytes
    assert 250 * 8 * largest < cap <= 8 * MIB


async def test_body_over_the_default_cap_is_refused_and_the_source_is_stale() -> None:
    """A real PodList just over the default cap is not read whole: the refresh fails `too_large`, the
    source has no workloads and says why it is stale, and the failure is counted by kind."""
    cap = KubeletConfig().max_body_bytes
    before = FETCH_ERRORS.get().get(("kubelet", "too_large"), 0)
    with FakeKubelet(FIX / "kubelet" / "podlist-mixed.json") as kubelet:
        kubelet.body = podlist_body([], cap + 1)
        src = _source(kubelet.url)
        await src.refresh()
    res = src.workloads()
    assert res.workloads == ()
    assert res.stale_reason is not None and "too_large" in res.stale_reason, res.stale_reason
    assert f"larger than {cap} bytes" in res.stale_reason
    assert FETCH_ERRORS.get()[("kubelet", "too_large")] == before + 1


async def test_a_good_list_then_an_over_cap_one_is_stale_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """After a good answer, an over-cap body makes the source stale at once (the node holds more than the
    agent can read, so the last good list is missing work), keeps that list for usage only, logs the
    reason, and a good answer makes it fresh again."""
    now = [1000.0]
    with FakeKubelet(FIX / "kubelet" / "podlist-mixed.json") as kubelet:
        src = KubeletSource(KubeletConfig(url=kubelet.url, token_file="", timeout_s=5, resync_s=1,
                                          stale_after_s=6, max_body_bytes=64 * 1024),
                            Layout("cgroupfs"), clock=lambda: now[0])
        await src.refresh()
        good = src.workloads()
        assert good.stale_reason is None and len(good.workloads) == 7
        kubelet.body = podlist_body([], 64 * 1024 + 1)
        await src.refresh()
        assert src.workloads().workloads == good.workloads
        reason = src.workloads().stale_reason
        assert reason is not None and "too_large" in reason
        assert any("too_large" in r.getMessage() for r in caplog.records)
        kubelet.body = (FIX / "kubelet" / "podlist-mixed.json").read_bytes()
        now[0] += 2
        await src.refresh()
        assert src.workloads().stale_reason is None


async def test_malformed_body_makes_the_source_stale_with_a_reason() -> None:
    with FakeKubelet(FIX / "kubelet" / "podlist-mixed.json") as kubelet:
        kubelet.body = b'{"kind": "PodList", "apiVersion": "v1", "items": [{"metadata": '
        src = _source(kubelet.url)
        await src.refresh()
    reason = src.workloads().stale_reason
    assert reason is not None and "garbage" in reason and "not JSON" in reason, reason


async def test_refresh_of_a_large_list_is_parsed_off_the_event_loop() -> None:
    """A 6 MiB list (3000 pods, under the cap) is fetched, decoded and parsed in a worker thread, and the
    loop keeps running while it happens; the pods all arrive. (How long the loop may wait for the GIL is a
    figure of bench/payload.py, not of this test.)"""
    parsed_in: list[int] = []

    class Recording(KubeletSource):
        def _parse(self, doc: object) -> tuple[list[ParsedPod], list[str]]:
            parsed_in.append(threading.get_ident())
            return super()._parse(doc)

    with FakeKubelet(FIX / "kubelet" / "podlist-mixed.json") as kubelet:
        kubelet.body = podlist_body([], 6 * MIB)
        src = Recording(KubeletConfig(url=kubelet.url, token_file="", timeout_s=10, resync_s=10,
                                      stale_after_s=30), Layout("cgroupfs"))
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0)
                ticks += 1

        task = asyncio.create_task(ticker())
        await src.refresh()
        done.set()
        await task
    res = src.workloads()
    assert res.stale_reason is None, res.stale_reason
    assert len(res.workloads) > 3000
    assert parsed_in and all(t != threading.get_ident() for t in parsed_in), "parsed on the loop's thread"
    assert ticks > 1, "the event loop did not run while the list was fetched and parsed"
