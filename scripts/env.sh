# Sourced by scripts/test and scripts/demo: a virtual environment in .venv, made with the machine's
# python3 (Debian's own Python refuses pip installs outside a venv), with Debian's venv module if missing.
set -euo pipefail
# Under `env -i` bash has a PATH of its own but does not export it; python3 -m venv needs it.
export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
apt_install() {
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    [ -n "${APT_UPDATED:-}" ] || { apt-get update -qq; APT_UPDATED=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  fi
}
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || { rm -rf .venv; apt_install python3-venv; python3 -m venv .venv; }
fi
PY="$PWD/.venv/bin/python"
