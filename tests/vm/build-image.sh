#!/usr/bin/env bash
# Prints the directory of the guest image for the current recipe, building it first if it is not cached.
# The cache is outside the checkout: ${COLOC_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coloc-agent/vm}/<hash>,
# <hash> covering the recipe (image.sh, initrd-init, rootfs/) and the Debian mirror. Builds are serialised
# with a lock (several checkouts may share the cache); the newest three images are kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${COLOC_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coloc-agent/vm}
missing=()
for tool in debootstrap mkfs.ext4 unshare chroot python3 gzip flock sha256sum; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] || { echo "guest image: missing host tools: ${missing[*]}" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "guest image: building it needs root (debootstrap, chroot)" >&2; exit 1; }
mirror=$(bash "$here/mirror.sh" bookworm)
hash=$(
  cd "$here"
  { echo "mirror $mirror"; find image.sh initrd-init rootfs -type f | LC_ALL=C sort | xargs sha256sum; } \
    | sha256sum | cut -c1-16
)
dir=$cache/$hash
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -e "$dir/ready" ]; then
  rm -rf "$dir.tmp"
  started=$(date +%s.%N)
  echo "guest image: building $dir from $mirror (once per recipe change, about a minute)" >&2
  if ! bash "$here/image.sh" "$dir.tmp" "$mirror" >&2; then
    rm -rf "$dir.tmp"
    echo "guest image: build failed" >&2
    exit 1
  fi
  took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$started" "$(date +%s.%N)")
  echo "$took" >"$dir.tmp/build-seconds"
  touch "$dir.tmp/ready"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  echo "guest image: built in ${took} s" >&2
  # Keep the newest three images (each ~0.5 GB on disk).
  ls -1dt "$cache"/*/ 2>/dev/null | grep -E '/[0-9a-f]{16}/$' | tail -n +4 | xargs -r rm -rf
fi
touch "$dir"
echo "$dir"
