#!/usr/bin/env bash
# The guest image recipe: a Debian root file system built from Debian's packages by debootstrap, the
# Debian kernel booted directly (its ELF vmlinux, through QEMU's PVH entry), a busybox initramfs that loads
# the few modules needed to mount the root disk. Usage (as root): image.sh <out dir> <Debian mirror>.
# Writes <out>/rootfs.img, <out>/vmlinux, <out>/initrd.img and <out>/kernel-release. Any change to this file
# or to the files beside it that it reads makes a new image (tests/vm/build-image.sh hashes them).
set -euo pipefail
out=$1
mirror=$2
suite=bookworm
here=$(cd "$(dirname "$0")" && pwd)
debs=${COLOC_VM_DEB_CACHE:-$(dirname "$out")/debs}  # downloaded packages, kept across recipes
root=$out/root
mkdir -p "$root" "$debs"

# Everything that mounts runs in a private mount namespace: nothing stays mounted on the host.
unshare -m --propagation private bash -euo pipefail -s "$root" "$mirror" "$suite" "$debs" <<'INNER'
root=$1 mirror=$2 suite=$3 debs=$4
debootstrap --variant=minbase --cache-dir="$debs" \
  --include=systemd,systemd-sysv,dbus,python3,kmod,procps,util-linux,busybox-static \
  "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 \
  || { tail -n 30 "$root.debootstrap.log" >&2; echo "debootstrap failed (log above)" >&2; exit 1; }
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind "$debs" "$root/var/cache/apt/archives"
# INITRD=No: the kernel's hooks make no Debian initramfs (the guest boots with its own busybox one).
chroot "$root" env DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -qq --no-install-recommends \
  linux-image-amd64 >"$root.kernel.log" 2>&1 \
  || { tail -n 30 "$root.kernel.log" >&2; echo "installing the kernel failed (log above)" >&2; exit 1; }
INNER
rm -f "$root.debootstrap.log" "$root.kernel.log"

kver=$(basename "$(ls -d "$root"/lib/modules/*/ | head -n 1)")
[ -n "$kver" ] && [ -e "$root/boot/vmlinuz-$kver" ] || { echo "no kernel in $root/boot" >&2; exit 1; }
echo "$kver" >"$out/kernel-release"

# Modules the guest never uses under QEMU (sound, graphics, radios, USB, ...): 650 -> ~430 MB.
for d in drivers/gpu drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband \
  drivers/usb drivers/staging drivers/bluetooth drivers/iio drivers/isdn drivers/hid drivers/input \
  drivers/scsi drivers/mmc drivers/nfc drivers/platform drivers/hwmon drivers/mtd drivers/watchdog \
  sound net/wireless net/bluetooth net/mac80211 fs/nfs fs/nfsd fs/ocfs2 fs/xfs fs/btrfs fs/cifs fs/smb; do
  rm -rf "$root/lib/modules/$kver/kernel/$d"
done
chroot "$root" depmod "$kver"
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
  "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin

# The guest's own configuration (units, fstab, the job runner) from tests/vm/rootfs.
cp -a "$here/rootfs/." "$root/"
chmod 0755 "$root/usr/local/sbin/coloc-guest-job"
echo coloc-guest >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 coloc-guest\n' >"$root/etc/hosts"
chroot "$root" systemd-machine-id-setup >/dev/null 2>&1  # a set machine id: no first-boot presets
chroot "$root" systemctl enable coloc-guest.service >/dev/null 2>&1
chroot "$root" systemctl set-default multi-user.target >/dev/null 2>&1
# Units that only cost boot time under emulation (the initramfs loaded the modules the guest needs; no udev:
# devtmpfs has the few device nodes the tests use), and generators for devices the guest does not have.
chroot "$root" systemctl mask >/dev/null 2>&1 \
  modprobe@drm.service modprobe@efi_pstore.service modprobe@dm_mod.service modprobe@loop.service \
  modprobe@fuse.service modprobe@configfs.service systemd-update-utmp.service systemd-sysusers.service \
  systemd-remount-fs.service systemd-binfmt.service proc-sys-fs-binfmt_misc.automount apt-daily.timer \
  apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-timesyncd.service \
  getty@tty1.service serial-getty@ttyS0.service systemd-logind.service systemd-pstore.service \
  sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount dev-mqueue.mount ldconfig.service \
  systemd-random-seed.service systemd-journal-flush.service systemd-modules-load.service \
  kmod-static-nodes.service systemd-update-utmp-runlevel.service systemd-user-sessions.service \
  systemd-sysctl.service systemd-firstboot.service systemd-udevd.service systemd-udev-trigger.service \
  systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-tmpfiles-setup-dev.service
mkdir -p "$root/etc/systemd/system-generators"
for g in systemd-cryptsetup-generator systemd-gpt-auto-generator systemd-sysv-generator; do
  ln -sf /dev/null "$root/etc/systemd/system-generators/$g"
done

# The kernel: the ELF inside the compressed bzImage (booted through PVH, ~2 s faster than the bzImage).
vmlinuz=$root/boot/vmlinuz-$kver
python3 - "$vmlinuz" "$out/vmlinux" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
for magic, name in ((b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd")):
    at = data.find(magic)
    if at < 0:
        continue
    if name == "xz":
        out = lzma.LZMADecompressor().decompress(data[at:])
    else:
        import subprocess
        out = subprocess.run(["zstd", "-dc"], input=data[at:], capture_output=True).stdout
    if out[:4] == b"\x7fELF":
        open(sys.argv[2], "wb").write(out)
        sys.exit(0)
sys.exit(f"no xz or zstd compressed ELF kernel found in {sys.argv[1]}")
PY

# The initramfs: static busybox, the modules for the virtio disk, ext4 and 9p (with their dependencies,
# in load order), and an init that mounts /dev/vda and switches to it.
ird=$out/initrd
mkdir -p "$ird/bin" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/newroot" "$ird/modules"
cp "$root/bin/busybox" "$ird/bin/busybox"
cp "$here/initrd-init" "$ird/init"
chmod 0755 "$ird/init"
moddir=$root/lib/modules/$kver
python3 - "$moddir" "$ird/modules" virtio_pci virtio_blk crc32c_generic ext4 9pnet_virtio 9p <<'PY'
import lzma, os, sys
moddir, dest, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
deps, builtin = {}, set()
for line in open(os.path.join(moddir, "modules.dep")):
    mod, _, rest = line.partition(":")
    deps[mod] = rest.split()
for line in open(os.path.join(moddir, "modules.builtin")):
    builtin.add(os.path.basename(line.strip()).split(".ko")[0])
by_name = {os.path.basename(m).split(".ko")[0].replace("-", "_"): m for m in deps}
order: list[str] = []
def add(path: str) -> None:
    for d in reversed(deps[path]):
        add(d)
    if path not in order:
        order.append(path)
for name in wanted:
    if name in builtin:
        continue
    if name not in by_name:
        sys.exit(f"kernel module {name} is neither built in nor in {moddir}")
    add(by_name[name])
with open(os.path.join(dest, "order"), "w") as f:
    for path in order:
        base = os.path.basename(path).split(".ko")[0] + ".ko"
        raw = open(os.path.join(moddir, path), "rb").read()
        if path.endswith(".xz"):
            raw = lzma.decompress(raw)
        elif path.endswith(".zst"):
            import subprocess
            raw = subprocess.run(["zstd", "-dc"], input=raw, capture_output=True, check=True).stdout
        open(os.path.join(dest, base), "wb").write(raw)
        f.write(base + "\n")
PY
(cd "$ird" && find . | LC_ALL=C sort | "$ird/bin/busybox" cpio -o -H newc 2>/dev/null) | gzip -1 >"$out/initrd.img"
rm -rf "$ird"

# The root file system image: its files plus 512 MiB free (tests write there; each boot's writes are
# thrown away, as QEMU runs it with snapshot=on).
mb=$(( $(du -sm "$root" | cut -f1) + 512 ))
mkfs.ext4 -q -F -L coloc-guest -d "$root" "$out/rootfs.img" "${mb}M"
rm -rf "$root"
