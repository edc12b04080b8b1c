"""Batch resources → cgroup limits (qos/batch_limits.py), from hand-built pods.

The expected values of the `koordlet_*` tests are koordlet's own test cases
(pkg/koordlet/runtimehooks/hooks/batchresource/batch_resource_test.go at koordinator a7a1b76b), with the
same inputs and the same expected shares / quota / memory limit.
"""

from __future__ import annotations

import json

import pytest

from qos.batch_limits import (
    BATCH_CPU,
    BATCH_MEMORY,
    BatchAmounts,
    BatchContainer,
    BatchPod,
    ExtendedSpecError,
    Limits,
    container_level,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    parse_extended_resource_spec,
    plan,
    pod_level,
    pod_limits,
)

GI = 1 << 30
MI = 1 << 20
POD = "besteffort/pod0a1b2c3d-0000-4000-8000-000000000001"


def _spec(containers: dict[str, dict[str, dict[str, str]]]) -> str:
    return json.dumps({"containers": containers})


def _pod(*containers: BatchContainer, annotation: str | None = None) -> BatchPod:
    return BatchPod("k8s/uid", "ns/be", POD, tuple(containers), annotation)


# -- conversions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("milli", "shares"), [
    (-5, 2), (0, 2), (1, 2), (2, 2), (3, 3), (500, 512), (999, 1022), (1000, 1024), (256_000, 262_144),
    (10**9, 262_144)])
def test_shares_are_rounded_down_and_clamped(milli: int, shares: int) -> None:
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(("milli", "quota"), [
    (-1, None), (0, None), (1, 1000), (9, 1000), (10, 1000), (11, 1100), (500, 50_000), (1000, 100_000),
    (1234, 123_400)])
def test_quota_is_rounded_down_with_a_floor_and_none_for_unlimited(milli: int, quota: int | None) -> None:
    assert milli_cpu_to_quota(milli) == quota


# -- koordlet's own cases ----------------------------------------------------------------------------------

TEST_SPEC = {"container-0": {"requests": {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"},
                             "limits": {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"}}}
TEST_SPEC1 = {**TEST_SPEC, "container-1": {"limits": {BATCH_CPU: "1000", BATCH_MEMORY: "2Gi"}}}
TEST_SPEC3 = {**TEST_SPEC, "container-1": {"requests": {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"}}}


def _pod_of(spec: dict[str, dict[str, dict[str, str]]], *, quota: bool = True) -> Limits | None:
    return pod_limits(_pod(annotation=_spec(spec)), cfs_quota=quota).pod


def test_koordlet_a_batch_pod_with_cpu_memory_requests() -> None:
    assert _pod_of(TEST_SPEC) == Limits(POD, 1024 * 500 // 1000, 100000 * 500 // 1000, 2 * GI)


def test_koordlet_a_batch_pod_with_cpu_memory_requests_1() -> None:
    assert _pod_of(TEST_SPEC1) == Limits(POD, 1024 * 500 // 1000, 100000 * 1500 // 1000, 4 * GI)


def test_koordlet_a_batch_pod_with_cfs_quota_unset() -> None:
    assert _pod_of(TEST_SPEC, quota=False) == Limits(POD, 512, None, 2 * GI)


def test_koordlet_a_batch_pod_with_no_limit() -> None:
    only_requests = {"container-0": {"requests": {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"}}}
    assert _pod_of(only_requests) == Limits(POD, 512, None, None)


def test_koordlet_a_batch_pod_with_partial_limited() -> None:
    assert _pod_of(TEST_SPEC3) == Limits(POD, 1000 * 1024 // 1000, None, None)


def test_koordlet_a_batch_container_with_requests_and_requests_1() -> None:
    full = BatchAmounts(500, 500, 2 * GI)
    assert container_level(full, "c") == Limits("c", 512, 50_000, 2 * GI)
    limits_only = BatchAmounts(None, 1000, 2 * GI)
    assert container_level(limits_only, "c") == Limits("c", 2, 100_000, 2 * GI)
    assert container_level(full, "c", cfs_quota=False) == Limits("c", 512, None, 2 * GI)


# -- the issue's pod ---------------------------------------------------------------------------------------


def test_the_issues_pod_at_pod_and_container_level() -> None:
    """batch-cpu 500/1000, batch-memory 256Mi/512Mi, one container."""
    pod = _pod(BatchContainer("main", f"{POD}/abc", BatchAmounts(500, 1000, 512 * MI)))
    p = pod_limits(pod)
    assert p.source == "spec" and not p.error
    assert p.pod == Limits(POD, 512, 100_000, 512 * MI)
    assert p.containers == (Limits(f"{POD}/abc", 512, 100_000, 512 * MI),)


def test_sums_leave_out_containers_without_batch_resources_and_init_containers() -> None:
    pod = _pod(BatchContainer("a", f"{POD}/a", BatchAmounts(300, 600, 2 * MI)),
               BatchContainer("sidecar", f"{POD}/s", None),
               BatchContainer("b", None, BatchAmounts(200, 400, 3 * MI)),
               BatchContainer("init", f"{POD}/i", BatchAmounts(4000, 8000, GI), init=True))
    p = pod_limits(pod)
    assert p.pod == Limits(POD, 512, 100_000, 5 * MI)
    # b has no cgroup yet; the sidecar has nothing; the init container gets its own values
    assert p.containers == (Limits(f"{POD}/a", 307, 60_000, 2 * MI), Limits(f"{POD}/i", 4096, 800_000, GI))


def test_one_container_without_a_limit_lifts_the_pods_limit() -> None:
    pod = _pod(BatchContainer("a", None, BatchAmounts(300, 600, 2 * MI)),
               BatchContainer("b", None, BatchAmounts(200, None, 0)))
    assert pod_limits(pod).pod == Limits(POD, 512, None, None)


def test_the_spec_wins_over_the_annotation() -> None:
    pod = _pod(BatchContainer("a", f"{POD}/a", BatchAmounts(1000, 1000, GI)),
               annotation=_spec(TEST_SPEC1))
    p = pod_limits(pod)
    assert p.source == "spec" and p.pod == Limits(POD, 1024, 100_000, GI)


def test_the_annotation_is_read_when_no_container_declares_a_batch_resource() -> None:
    pod = _pod(BatchContainer("container-0", f"{POD}/c0", None), BatchContainer("container-1", None, None),
               annotation=_spec(TEST_SPEC1))
    p = pod_limits(pod)
    assert p.source == "annotation"
    assert p.pod == Limits(POD, 512, 150_000, 4 * GI)
    assert p.containers == (Limits(f"{POD}/c0", 512, 50_000, 2 * GI),)


def test_a_pod_with_nothing_declared_is_left_as_the_kubelet_made_it() -> None:
    p = pod_limits(_pod(BatchContainer("a", f"{POD}/a", None)))
    assert p.pod is None and p.containers == () and not p.error
    assert pod_limits(_pod(annotation='{"containers": {}}')).pod is None


@pytest.mark.parametrize(("text", "fragment"), [
    ("not json", "not JSON"),
    ("[]", "expected an object"),
    ('{"containers": []}', "containers: expected an object"),
    ('{"containers": {"a": 5}}', "containers['a']: expected an object"),
    ('{"containers": {"a": {"limits": {"kubernetes.io/batch-cpu": "-1"}}}}', "out of range"),
    ('{"containers": {"a": {"limits": {"kubernetes.io/batch-memory": "lots"}}}}', "not a quantity"),
    ('{"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "1e30"}}}}', "out of range"),
    ('{"containers": {"a": {"requests": []}}}', "requests: expected an object"),
])
def test_a_malformed_annotation_is_named_and_changes_nothing(text: str, fragment: str) -> None:
    with pytest.raises(ExtendedSpecError, match="extended-resource-spec") as err:
        parse_extended_resource_spec(text)
    assert fragment in str(err.value)
    p = pod_limits(_pod(BatchContainer("a", f"{POD}/a", None), annotation=text))
    assert p.pod is None and p.containers == () and fragment in p.error


def test_a_malformed_annotation_that_is_not_needed_is_not_read() -> None:
    p = pod_limits(_pod(BatchContainer("a", f"{POD}/a", BatchAmounts(100, 100, MI)), annotation="{"))
    assert p.pod == Limits(POD, 102, 10_000, MI) and not p.error


def test_hostile_sizes_are_refused() -> None:
    with pytest.raises(ExtendedSpecError, match="bytes"):
        parse_extended_resource_spec(" " * (64 * 1024 + 1))
    many = {f"c{i}": {} for i in range(300)}
    with pytest.raises(ExtendedSpecError, match="more than 256"):
        parse_extended_resource_spec(json.dumps({"containers": many}))


def test_pod_level_sum_is_clamped_and_plan_keeps_order() -> None:
    big = [BatchAmounts(200_000, 200_000, GI)] * 2
    assert pod_level(big, POD) == Limits(POD, 262_144, 40_000_000, 2 * GI)
    pods = [_pod(BatchContainer("a", None, BatchAmounts(1000, None, None))),
            BatchPod("k8s/two", "ns/two", "besteffort/pod2", ())]
    assert [p.key for p in plan(pods)] == ["k8s/uid", "k8s/two"]


def test_no_pod_quota_while_the_tier_is_suppressed_by_a_quota() -> None:
    from qos.batch_limits import pod_quota_allowed
    from qos.suppression import CFS_QUOTA, SuppressionConfig
    assert pod_quota_allowed(SuppressionConfig())
    assert not pod_quota_allowed(SuppressionConfig(policy=CFS_QUOTA))
    assert not pod_quota_allowed(SuppressionConfig(cpuset_quota=True))
    assert pod_quota_allowed(SuppressionConfig(policy=CFS_QUOTA, enabled=False))
