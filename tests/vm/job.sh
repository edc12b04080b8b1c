# Runs inside the guest as root (started by the image's coloc-guest-job, which records the exit status).
# The checkout and the guest venv are mounted at their host paths, so absolute paths (scripts' shebangs,
# sys.executable) mean the same inside and out. Its output is streamed to the host by tests/vm/harness.py.
set -u
ctl=/run/coloc-ctl
. "$ctl/env"
opts=trans=virtio,version=9p2000.L,msize=262144
mkdir -p "$CHECKOUT" "$VENV"
# cache=loose: Python imports twice as fast; the host leaves the tree alone while the guest runs.
mount -t 9p -o "$opts,cache=loose" share "$CHECKOUT" || { echo "job: cannot mount the checkout"; exit 75; }
mount -t 9p -o "$opts,cache=loose,ro" venv "$VENV" || { echo "job: cannot mount the guest venv"; exit 75; }
cd "$CHECKOUT" || exit 75
echo "guest: $(uname -r), $(nproc) cpus, cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
export HOME=/root LANG=C.UTF-8 PATH="$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin" PYTHONPATH="$CHECKOUT"
export COLOC_IN_GUEST=1 COLOC_REQUIRE_CGROUPS=1
if [ -n "${COMMAND:-}" ]; then  # harness.py --command (scripts/vm-bench): a command instead of pytest
  bash -c "$COMMAND"
  rc=$?
else
  eval "set -- $PYTEST_ARGS"
  "$VENV/bin/python" -m pytest -p no:cacheprovider -v -rfEs \
    --junitxml="$ctl/junit.xml" "$@"
  rc=$?
fi
cd /
sync
umount "$CHECKOUT" "$VENV"
exit $rc
