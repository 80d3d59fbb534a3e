#!/usr/bin/env bash
# build-arm64.sh: build the ARM64 demo image (kernel, busybox initrd, a busybox root for NFS and
# its squashfs for NBD) and the network GRUB that ARM64 UEFI firmware loads. Every binary is an
# arm64 Debian package fetched with `apt-get download PKG:arm64` and unpacked with `dpkg -x`:
# nothing is installed, and the host needs `dpkg --add-architecture arm64` (scripts/setup
# --arm64 does it). See images/README.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPE="$HERE/demo-recipe"
SUITE="${BOOTPOOL_SUITE:-bookworm}"
# The arm64 packages: the kernel (its modules too), a static busybox for the initrd and the
# root, and Debian's signed network GRUB (grubnetaa64.efi.signed: Debian ships no arm64 iPXE).
PACKAGES="busybox-static grub-efi-arm64-signed"
# nbd-client for NBD roots (busybox has none) and the libraries it links, by hand: the arm64
# binary cannot run here for ldd to name them (its Depends, and libgnutls30's).
NBD_PACKAGES="nbd-client libc6 libgnutls30 libnl-3-200 libnl-genl-3-200 libgmp10 libhogweed6
    libnettle8 libidn2-0 libp11-kit0 libtasn1-6 libunistring2 libffi8"
# Modules beyond the demo's list: the PCI host of qemu's `virt` machine when the kernel is
# given a device tree (with ACPI the host bridge is built in), and virtio over MMIO.
EXTRA_MODULES="pci_host_generic virtio_mmio"

usage() {
    cat <<EOF
usage: $0 [--force] [OUT_DIR]

Builds the ARM64 demo image into OUT_DIR (default: \$BOOTPOOL_ARM64_OUT, else $HERE/demo-arm64):

  vmlinuz       Debian's $SUITE arm64 kernel (linux-image-arm64's versioned dependency), an EFI
                application (its EFI stub) that GRUB starts
  initrd.img    gzip'd newc cpio: arm64 busybox-static, nbd-client and its libraries, the
                modules of images/demo-recipe/modules.list (+ $EXTRA_MODULES), /init from
                images/demo-recipe/initrd-init (NFS roots by busybox mount, NBD by nbd-client;
                not qemu-nbd, mount.nfs or klibc's nfsmount)
  rootfs/       a busybox root whose /sbin/init is images/demo-recipe/rootfs-init (NFS)
  rootfs.img    the same tree as squashfs
  grubnetaa64.efi.signed
                Debian's signed network GRUB for arm64 (grub-efi-arm64-signed): bootpool
                hands it to ARM64 UEFI firmware (server.grub_arm64)
  .stamp        hash of the recipe; a rerun with an unchanged recipe does nothing

Options:
  --force       rebuild even if the stamp matches
  -h, --help    this text

Needs root (device nodes), arm64 in \`dpkg --print-foreign-architectures\` with its package
lists (apt-get update), and: busybox-static kmod squashfs-tools cpio gzip.
EOF
}

FORCE=0
OUT="${BOOTPOOL_ARM64_OUT:-$HERE/demo-arm64}"
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --force) FORCE=1 ;;
        -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
        *) OUT="$1" ;;
    esac
    shift
done

T0=$(date +%s)
step() { printf '[build-arm64 %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "build-arm64: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (device nodes in the cpio)"
for tool in apt-get apt-cache dpkg modprobe depmod mksquashfs cpio gzip sha256sum flock; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done
dpkg --print-foreign-architectures | grep -qx arm64 \
    || die "arm64 is not a dpkg architecture here: dpkg --add-architecture arm64 && apt-get update"
# The applet names come from the host's busybox: the arm64 one cannot run here.
[ -x /bin/busybox ] || die "missing /bin/busybox (apt-get install busybox-static)"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CACHE="$OUT/.cache"
WORK="$OUT/.work"
mkdir -p "$CACHE"
exec 9> "$OUT/.lock"
if ! flock -n 9; then
    step "waiting for another build of $OUT"
    flock 9
fi

KPKG="$(apt-cache depends linux-image-arm64:arm64 2>/dev/null \
        | sed -n 's/^ *Depends: \(linux-image-[0-9].*-arm64\)\(:arm64\)\?$/\1/p' | head -n1)"
[ -n "$KPKG" ] || die "cannot find linux-image-arm64's kernel package (apt-get update?)"
KVER="${KPKG#linux-image-}"

HASH="$(
    cd "$HERE"
    { echo "suite=$SUITE kernel=$KPKG packages=$PACKAGES $NBD_PACKAGES extra=$EXTRA_MODULES"
      sha256sum build-arm64.sh demo-recipe/initrd-init demo-recipe/udhcpc.script \
          demo-recipe/rootfs-init demo-recipe/modules.list
    } | sha256sum | cut -d' ' -f1
)"
if [ "$FORCE" = 0 ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$HASH" ] \
   && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ] && [ -f "$OUT/rootfs.img" ] \
   && [ -L "$OUT/rootfs/sbin/init" ] && [ -f "$OUT/grubnetaa64.efi.signed" ]; then
    step "up to date ($OUT, recipe $HASH)"
    exit 0
fi
rm -f "$OUT/.stamp"
rm -rf "$WORK"
mkdir -p "$WORK"

# fetch PKG: the path of PKG's arm64 .deb in $CACHE, downloaded once.
fetch() {
    local deb
    deb="$(ls "$CACHE/$1"_*_arm64.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$deb" ]; then
        (cd "$CACHE" && apt-get download -q "$1:arm64" 2>&1 | grep -v unsandboxed >&2 || true)
        deb="$(ls "$CACHE/$1"_*_arm64.deb 2>/dev/null | head -n1 || true)"
        [ -n "$deb" ] || die "apt-get download $1:arm64 failed"
    fi
    echo "$deb"
}

step "kernel: $KPKG"
dpkg -x "$(fetch "$KPKG")" "$WORK/kernel"
for p in $PACKAGES; do
    step "unpacking $p:arm64"
    dpkg -x "$(fetch "$p")" "$WORK/pkgs"
done
step "unpacking nbd-client:arm64 and its libraries"
for p in $NBD_PACKAGES; do
    dpkg -x "$(fetch "$p")" "$WORK/nbd"
done
[ -x "$WORK/nbd/sbin/nbd-client" ] || die "no sbin/nbd-client in nbd-client:arm64"
BUSYBOX="$WORK/pkgs/bin/busybox"
[ -f "$BUSYBOX" ] || die "no bin/busybox in busybox-static:arm64"
GRUB="$WORK/pkgs/usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed"
[ -f "$GRUB" ] || die "no grubnetaa64.efi.signed in grub-efi-arm64-signed:arm64"
# The package ships no modules.dep (its postinst runs depmod).
depmod -b "$WORK/kernel" "$KVER" || die "depmod failed"

# tree DIR: busybox and a link per applet in DIR/bin, the pseudo filesystems' mount points.
tree() {
    mkdir -p "$1"/{bin,sbin,etc,proc,sys,dev,run,tmp,mnt}
    cp "$BUSYBOX" "$1/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ -e "$1/bin/$applet" ] || ln -s busybox "$1/bin/$applet"
    done
}

step "initrd: modules and dependencies (modprobe --show-depends)"
IR="$WORK/initrd"
tree "$IR"
mkdir -p "$IR/lib/modules" "$IR/usr/share/udhcpc" "$IR/newroot" "$IR/etc/bootpool"
: > "$IR/etc/bootpool/modules"
names="$(sed 's/#.*//' "$RECIPE/modules.list") $EXTRA_MODULES"
for m in $names; do
    # `insmod PATH` lines, dependencies first; `builtin NAME` for those built in.
    modprobe -d "$WORK/kernel" -S "$KVER" --show-depends "$m" > "$WORK/deps" \
        || die "module $m is not in $KPKG"
    while read -r what path _; do
        [ "$what" = insmod ] || continue
        name="$(basename "$path")"
        grep -qx "$name" "$IR/etc/bootpool/modules" && continue
        cp "$path" "$IR/lib/modules/$name"
        echo "$name" >> "$IR/etc/bootpool/modules"
    done < "$WORK/deps"
done
step "initrd: $(wc -l < "$IR/etc/bootpool/modules") modules"
# nbd-client, the dynamic loader and the libraries' files (not their subfolders: gconv...).
cp "$WORK/nbd/sbin/nbd-client" "$IR/sbin/"
for d in lib/aarch64-linux-gnu usr/lib/aarch64-linux-gnu; do
    [ -d "$WORK/nbd/$d" ] || continue
    mkdir -p "$IR/$d"
    find "$WORK/nbd/$d" -maxdepth 1 -name '*.so*' -exec cp -a {} "$IR/$d/" \;
done
cp -a "$WORK/nbd/lib/ld-linux-aarch64.so.1" "$IR/lib/" || die "no ld-linux-aarch64.so.1 in libc6"
install -m 0755 "$RECIPE/initrd-init" "$IR/init"
install -m 0755 "$RECIPE/udhcpc.script" "$IR/usr/share/udhcpc/default.script"
echo "$KVER" > "$IR/etc/bootpool/kernel-version"
mknod -m 600 "$IR/dev/console" c 5 1
mknod -m 666 "$IR/dev/null" c 1 3
(cd "$IR" && find . -mindepth 1 -print0 | LC_ALL=C sort -z \
    | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -9n > "$WORK/initrd.img"

step "rootfs: busybox and the demo init"
RT="$WORK/rootfs"
tree "$RT"
mkdir -p "$RT/usr/local/sbin" "$RT/var"
install -m 0755 "$RECIPE/rootfs-init" "$RT/usr/local/sbin/bootpool-demo-init"
# Debian's busybox has no `mountpoint` applet, which the demo init asks before mounting
# (the x86 root has util-linux's): the same question, answered from /proc/mounts.
mkdir -p "$RT/usr/local/bin"
printf '%s\n' '#!/bin/sh' '# mountpoint [-q] DIR: is DIR a mount point? (for the demo init)' \
    '[ "$1" = -q ] && shift' 'grep -q "^[^ ]* $1 " /proc/mounts 2>/dev/null' \
    > "$RT/usr/local/bin/mountpoint"
chmod 0755 "$RT/usr/local/bin/mountpoint"
ln -s ../usr/local/sbin/bootpool-demo-init "$RT/sbin/init"
echo bootpool-demo-arm64 > "$RT/etc/hostname"
echo "$HASH" > "$RT/etc/bootpool-demo-recipe"
mksquashfs "$RT" "$WORK/rootfs.img" -noappend -comp gzip -b 131072 -no-progress -quiet \
    > /dev/null

step "publishing into $OUT"
cp "$WORK/kernel/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
cp "$GRUB" "$WORK/grubnetaa64.efi.signed"
rm -rf "$OUT/rootfs" "$OUT/vmlinuz" "$OUT/initrd.img" "$OUT/rootfs.img" \
    "$OUT/grubnetaa64.efi.signed"
mv "$WORK/vmlinuz" "$WORK/initrd.img" "$WORK/rootfs.img" "$WORK/rootfs" \
    "$WORK/grubnetaa64.efi.signed" "$OUT/"
echo "$KVER" > "$OUT/kernel-version"
rm -rf "$WORK"
echo "$HASH" > "$OUT/.stamp"
step "done: vmlinuz $(du -m "$OUT/vmlinuz" | cut -f1) MiB, initrd.img" \
     "$(du -m "$OUT/initrd.img" | cut -f1) MiB (kernel $KVER)"
