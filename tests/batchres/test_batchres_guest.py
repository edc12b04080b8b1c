"""BE pods' batch limits on pure cgroup v2 with the systemd driver: the test guest (docs/testing.md).

The pod slice and the container scope are made through systemd (`systemd-run --scope --slice=...`, as the
runtime asks for a container's scope; tests/kit/systemd.py); the kubelet is a local HTTP server with its
PodList. v2 values: `cpu.weight` = 1 + (512 − 2) × 9999 / 262142 = 20, `cpu.max` "100000 100000",
`memory.max` 512 MiB; quota and memory are held through systemd, so a daemon-reload keeps them.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from batchkit import MI, be_pod, controller, write_list
from kit.fakes.kubelet import FakeKubelet
from kit.poll import wait
from kit.systemd import CGROUP2, SystemdPods, read, systemctl, systemd_v2_host

from cgroups.discovery import Hierarchy
from cgroups.layout import Layout
from cgroups.systemd import SystemdUnits
from cgroups.writer import CgroupWriter

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)

HOG = ("import os, time\n"
       "while not os.path.exists({flag!r}): time.sleep(0.05)\n"
       "b = bytearray(900 << 20)\n"
       "time.sleep(60)\n")


async def test_v2_pod_and_container_limits_held_through_systemd(own_pods: SystemdPods,
                                                                tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    flag = tmp_path / "go"
    # The hog runs below a shell that outlives it: were the OOM-killed hog the scope's only process,
    # systemd would end the scope and remove its cgroup before its memory.events could be read.
    scope = own_pods.scope("besteffort", uid, argv=["sh", "-c", f'{sys.executable} -c "$0"; exec sleep 3600',
                                                     HOG.format(flag=str(flag))])
    cid = scope.rsplit("/", 1)[-1].removeprefix("cri-containerd-").removesuffix(".scope")
    rel = scope.removeprefix(own_pods.root + "/")
    layout = Layout("systemd", kubepods=own_pods.kubepods)
    pod = layout.pod(uid, "besteffort")
    assert rel == f"{pod}/cri-containerd-{cid}.scope"
    writer = CgroupWriter(Hierarchy.v2(CGROUP2), own_pods.root, units=SystemdUnits("/" + own_pods.root))
    with FakeKubelet(write_list(tmp_path / "pods.json", be_pod(uid, cid))) as fake:
        ctl, kubelet = controller(fake.url, writer, watch=False, layout=layout)
        await kubelet.refresh()
        report = ctl.pass_once()
    assert f"k8s/{uid}" not in report.pending, report.pending
    for r in (pod, rel):
        full = f"{own_pods.root}/{r}"
        assert read(full, "cpu.weight") == "20", r
        assert read(full, "cpu.max") == "100000 100000", r
        assert read(full, "memory.max") == str(512 * MI), r

    systemctl("daemon-reload")  # systemd re-applies its units' properties: ours are among them
    for r in (pod, rel):
        full = f"{own_pods.root}/{r}"
        assert read(full, "cpu.max") == "100000 100000", r
        assert read(full, "memory.max") == str(512 * MI), r

    flag.write_text("go")  # the hog allocates 900 MiB in a 512 MiB container
    events = f"{own_pods.root}/{rel}"
    assert wait(lambda: "oom_kill 0" not in read(events, "memory.events"), 30), read(events, "memory.events")
    assert os.path.isdir(CGROUP2 / own_pods.root / pod)
