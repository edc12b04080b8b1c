"""The agent's D-Bus client against systemd's own socket, while a CPU burner runs beside systemd.

Runs on a real systemd (PID 1) with pure cgroup v2: the test guest (docs/testing.md). Seen in CI and then
measured there: with jeepney's handshake (`BEGIN` sent after the server's `OK`, the first call right
behind it) systemd 252 answered 0 of 8 fresh connections while a BE container burned a CPU, because it
read `BEGIN` and the call in one `read` and left the call in its buffer; the agent then wrote knobs to the
files alone. With `BEGIN` sent together with `AUTH`, as sd-bus's own client does, 8 of 8 answered at once.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kit.systemd import SystemdPods, systemd_v2_host

from cgroups.systemd import PRIVATE_SOCKET, SystemdUnits

pytestmark = pytest.mark.guest
why_not = systemd_v2_host()
if why_not is not None:
    pytest.skip(f"needs the systemd + cgroup v2 guest: {why_not}", allow_module_level=True)


def test_every_fresh_connection_is_answered_while_a_burner_runs(own_pods: SystemdPods) -> None:
    own_pods.scope("besteffort", str(uuid.uuid4()), ["sh", "-c", "while :; do :; done"])
    answered = []
    for _ in range(8):
        units = SystemdUnits("/" + own_pods.root, socket_path=PRIVATE_SOCKET, timeout_s=3.0, retry_s=0.0)
        started = time.monotonic()
        try:
            version = units.version()
        finally:
            units.close()
        answered.append((version.split(".")[0], round(time.monotonic() - started, 2)))
    assert all(v.isdigit() for v, _ in answered), answered
