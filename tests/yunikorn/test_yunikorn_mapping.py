"""The `recover --json-yunikorn` mapping on a recovered cluster built from ledger records (no agents, no I/O
but compiling the pinned si.proto, see sikit): every line parses as the si message it names, and the
points yunikorn-core and the k8shim care about hold (bare pod UIDs, `foreign`, tags, originator, ugi,
no zero-resource allocation)."""

from __future__ import annotations

import json

import pytest
from sikit import SI_VERSION, as_dict, parse_output

from agent.recovery.cluster import Cluster, NodeState
from agent.recovery.yunikorn import si_messages
from agent.state.records import (
    Allocation,
    Application,
    Identity,
    LedgerView,
    Lifecycle,
    NodeRecord,
    Phase,
)
from qos.model import Resources, Source

TS = "1700000000000"
GIB = 1 << 30
UID_POD = "0a1b2c3d-0000-4000-8000-000000000001"
UID_EMPTY = "0a1b2c3d-0000-4000-8000-000000000002"
UID_ADMITTED = "0a1b2c3d-0000-4000-8000-000000000003"
YAPP1, YAPP2 = f"application_{TS}_0001", f"application_{TS}_0002"
AM1, W1, Z1 = (f"container_e01_{TS}_0001_01_{s:06d}" for s in (1, 2, 3))
AM2 = f"container_e01_{TS}_0002_01_000001"
USER_INFO = '{"user":"alice","groups":["dev"]}'


def _alloc(key: str, app: str, source: Source, res: Resources, **kw: object) -> Allocation:
    return Allocation(key=key, application_id=app, source=source, resources=res,
                      phase=kw.pop("phase", Phase.RUNNING), created_at=1_700_000_100.0, **kw)  # type: ignore[arg-type]


def _cluster() -> Cluster:
    allocs = (
        _alloc(f"k8s/{UID_POD}", f"k8s/{UID_POD}", Source.K8S, Resources(2000, 4 * GIB), name="spark-exec-1",
               namespace="batch", priority=5500, started_at=1_700_000_001.0),
        _alloc(f"k8s/{UID_EMPTY}", f"k8s/{UID_EMPTY}", Source.K8S, Resources(), name="be-nothing",
               namespace="batch"),
        _alloc(f"yarn/{AM1}", YAPP1, Source.YARN, Resources(1000, GIB), name=AM1),
        _alloc(f"yarn/{W1}", YAPP1, Source.YARN, Resources(2000, 2 * GIB), name=W1),
        _alloc(f"yarn/{Z1}", YAPP1, Source.YARN, Resources(), name=Z1),
        _alloc(f"k8s/{UID_ADMITTED}", "spark-pi", Source.K8S, Resources(500, GIB), name="spark-pi-driver",
               namespace="jobs", scheduler_epoch=7, phase=Phase.PENDING_LAUNCH, request_id="r1",
               tags=(("kubernetes.io/label/app", "spark"), ("yunikorn.apache.org/user.info", USER_INFO),
                     ("kubernetes.io/label/yunikorn.apache.org/queue", "root.jobs"))),
        _alloc(f"yarn/{AM2}", YAPP2, Source.YARN, Resources(1000, GIB), scheduler_epoch=7,
               tags=(("yunikorn.apache.org/username", "bob"),)),
    )
    by_id = {a.application_id: Application(a.application_id, a.source, 1.0) for a in allocs}
    apps = tuple(by_id[k] for k in sorted(by_id))
    view = LedgerView(
        identity=Identity("node-a", "inc-1", "boot-1", 1.0), revision=9, oldest_watchable_revision=1,
        node=NodeRecord("node-a", Resources(8000, 16 * GIB), Resources(4000, 8 * GIB), Lifecycle.SCHEDULABLE),
        applications=apps, allocations=allocs, taken_at=2.0)
    cl = Cluster(["/run/a.sock"])
    cl.load_snapshot("/run/a.sock", view)
    cl.nodes["/run/a.sock"].state = NodeState.RECOVERED
    return cl


@pytest.fixture
def printed() -> tuple[list[dict[str, object]], list[str]]:
    out = si_messages(_cluster(), "coloc", version="1.2.3")
    text = "\n".join(out.lines()) + "\n"
    assert all("\n" not in line for line in out.lines())
    return [{name: as_dict(m)} for name, m in parse_output(text)], out.notes


def test_yunikorn_every_line_is_an_si_message_in_registration_order(printed: tuple[list[dict[str, object]],
                                                                                    list[str]]) -> None:
    msgs, _ = printed
    assert SI_VERSION == "v1.8.0"
    assert [next(iter(m)) for m in msgs] == ["RegisterResourceManagerRequest", "NodeRequest",
                                             "ApplicationRequest", "AllocationRequest", "NodeRequest"]
    reg = msgs[0]["RegisterResourceManagerRequest"]
    assert reg == {"rmID": "coloc", "version": "1.2.3", "policyGroup": "queues",
                   "buildInfo": {"buildVersion": "1.2.3"}}  # type: ignore[comparison-overlap]
    assert all(next(iter(m.values()))["rmID"] == "coloc" for m in msgs)  # type: ignore[index]
    node = msgs[1]["NodeRequest"]["nodes"][0]  # type: ignore[index]
    assert node["action"] == "CREATE_DRAIN"
    assert node["attributes"] == {"si.io/hostname": "node-a", "si.io/rackname": "/rack-default"}
    assert node["schedulableResource"]["resources"] == {"vcore": {"value": "4000"},
                                                        "memory": {"value": str(8 * GIB)}}
    assert msgs[4]["NodeRequest"]["nodes"] == [{"nodeID": "node-a", "action": "DRAIN_TO_SCHEDULABLE"}]  # type: ignore[index]


def test_yunikorn_allocations_as_the_k8shim_sends_them(
        printed: tuple[list[dict[str, object]], list[str]]) -> None:
    msgs, skipped = printed
    allocs = {a["allocationKey"]: a for a in msgs[3]["AllocationRequest"]["allocations"]}  # type: ignore[index]
    # Bare pod UIDs; YARN keeps its container id; the two zero-resource allocations are left out.
    assert set(allocs) == {UID_POD, UID_ADMITTED, f"yarn/{AM1}", f"yarn/{W1}", f"yarn/{AM2}"}
    assert [s.split(":")[0] for s in skipped] == [f"k8s/{UID_EMPTY}", f"yarn/{Z1}"]
    assert all("allocation contains no resources" in s for s in skipped)
    for a in allocs.values():
        assert any(int(q["value"]) > 0 for q in a["resourcePerAlloc"]["resources"].values())
        assert a["nodeID"] == "node-a"

    pod = allocs[UID_POD]  # adopted from the kubelet: no scheduler placed it
    assert "applicationID" not in pod and "partitionName" not in pod
    assert pod["allocationTags"] == {"foreign": "default", "kubernetes.io/meta/namespace": "batch",
                                     "kubernetes.io/meta/podName": "spark-exec-1",
                                     "creationTime": "1700000001"}
    assert pod["priority"] == 5500

    adm = allocs[UID_ADMITTED]  # admitted through the API: name, namespace and tags kept
    assert adm["applicationID"] == "spark-pi" and "foreign" not in adm["allocationTags"]
    assert adm["allocationTags"]["kubernetes.io/label/app"] == "spark"
    assert adm["allocationTags"]["kubernetes.io/meta/namespace"] == "jobs"
    assert adm["allocationTags"]["kubernetes.io/meta/podName"] == "spark-pi-driver"
    assert adm.get("originator") is True  # the application's first real allocation

    assert allocs[f"yarn/{AM1}"].get("originator") is True
    assert "originator" not in allocs[f"yarn/{W1}"]
    assert allocs[f"yarn/{AM1}"]["applicationID"] == YAPP1
    assert allocs[f"yarn/{AM2}"].get("originator") is True


def test_yunikorn_applications_carry_queue_and_the_real_user(
        printed: tuple[list[dict[str, object]], list[str]]) -> None:
    msgs, _ = printed
    apps = {a["applicationID"]: a for a in msgs[2]["ApplicationRequest"]["new"]}  # type: ignore[index]
    assert set(apps) == {"spark-pi", YAPP1, YAPP2}  # no made-up application for a foreign pod
    assert apps["spark-pi"]["ugi"] == {"user": "alice", "groups": ["dev"]}
    assert apps["spark-pi"]["queueName"] == "root.jobs"
    assert apps["spark-pi"]["tags"]["namespace"] == "jobs"
    assert apps[YAPP2]["ugi"] == {"user": "bob"}
    assert apps[YAPP1]["ugi"] == {"user": "nobody"}  # not known to the ledger: the k8shim's default
    assert all(a["tags"]["application.create.force"] == "true" for a in apps.values())
    assert all(a["partitionName"] == "default" for a in apps.values())


def test_yunikorn_bad_user_tag_falls_back_and_says_so() -> None:
    cl = _cluster()
    nc = cl.nodes["/run/a.sock"]
    key = f"yarn/{AM2}"
    a = nc.allocations[key]
    nc.allocations[key] = Allocation(**{**{f: getattr(a, f) for f in a.__slots__},  # type: ignore[arg-type]
                                        "tags": (("yunikorn.apache.org/username", "rm -rf /"),)})
    out = si_messages(cl, "coloc")
    app = next(m["ApplicationRequest"]["new"] for m in out.messages if "ApplicationRequest" in m)
    assert {x["applicationID"]: x["ugi"]["user"] for x in app}[YAPP2] == "nobody"
    assert any("rm -rf /" in s and "invalid username" in s for s in out.notes)
    json.dumps(out.messages)
