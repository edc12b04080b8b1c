"""tests/vm: the host side of the guest stage (test_vm_guest.py) and, in guest/, the tests that run inside
the cgroup v2 + systemd guest. Each side ignores the other's files: guest/ is collected only inside the
guest (COLOC_IN_GUEST=1, set by tests/vm/job.sh), the host's results check only outside it."""

from __future__ import annotations

import os

collect_ignore = ["test_vm_guest.py"] if os.environ.get("COLOC_IN_GUEST") == "1" else ["guest"]
