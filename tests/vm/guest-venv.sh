#!/usr/bin/env bash
# Prints the directory of the guest's virtual environment, making it first if it is not cached. It is made
# on the host with Debian's own Python (/usr/bin/python3.11, the interpreter the guest image has: a venv of
# another build does not run in the guest) and holds the agent's locked dependencies (requirements.lock,
# with hashes) and the test runner; the checkout itself is found through PYTHONPATH in the guest. Cached in
# ${COLOC_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coloc-agent/vm}/venv-<hash of requirements.lock (made from
# pyproject.toml's dependencies) and this file>; the newest three are kept. (pyproject.toml itself is not
# hashed: its other sections change often and nothing of them goes into this venv.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${COLOC_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coloc-agent/vm}
python=/usr/bin/python3.11
[ -x "$python" ] || { echo "guest venv: $python is missing (Debian package python3.11)" >&2; exit 1; }
hash=$(cat "$top/requirements.lock" "$here/guest-venv.sh" | sha256sum | cut -c1-16)
dir=$cache/venv-$hash
mkdir -p "$cache"
exec 9>"$cache/.lock-venv"
flock 9
if [ ! -e "$dir/ready" ]; then
  rm -rf "$dir"
  echo "guest venv: making $dir (once per dependency change)" >&2
  "$python" -m venv "$dir" >&2 || {
    rm -rf "$dir"
    echo "guest venv: '$python -m venv' failed (Debian package python3.11-venv missing?)" >&2
    exit 1
  }
  # The test runner and plugins the guest selection uses, within the bounds of pyproject.toml's dev extra.
  log=$cache/venv-$hash.log
  if ! "$dir/bin/python" -m pip install -q --require-hashes -r "$top/requirements.lock" >"$log" 2>&1 \
    || ! "$dir/bin/python" -m pip install -q 'pytest>=8' 'pytest-asyncio>=0.23' 'pytest-timeout>=2.3' \
      'pytest-xdist>=3.5' >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -rf "$dir"
    echo "guest venv: installing the dependencies failed (pip's output above, all of it in $log)" >&2
    exit 1
  fi
  rm -f "$log"
  touch "$dir/ready"
  ls -1dt "$cache"/venv-*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
fi
echo "$dir"
