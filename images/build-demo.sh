#!/usr/bin/env bash
# build-demo.sh: build bootpool's demo image (kernel, busybox initrd, Debian root tree and its
# squashfs image). See images/README.md for the kernel command line contract.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPE="$HERE/demo-recipe"
SUITE="${BOOTPOOL_SUITE:-bookworm}"
MIRROR="${BOOTPOOL_MIRROR:-http://deb.debian.org/debian}"
# Packages added to debootstrap's minbase: busybox-static gives the root's init its wget
# (for the callback) and `poweroff -f` (minbase has no init system).
INCLUDE="busybox-static"

usage() {
    cat <<EOF
usage: $0 [--force] [OUT_DIR]

Builds the bootpool demo image into OUT_DIR (default: \$BOOTPOOL_IMAGE_OUT, else
$HERE/demo):

  vmlinuz       Debian's $SUITE kernel (linux-image-amd64's versioned dependency), unpacked
                with apt-get download + dpkg -x, never installed on the host
  initrd.img    gzip'd newc cpio: busybox-static, nbd-client, qemu-nbd and mount.nfs (+
                their libraries), klibc's nfsmount, the modules
                for virtio_net/e1000, NFSv3 over TCP, nbd, squashfs, loop, overlay; /init from
                images/demo-recipe/initrd-init
  rootfs/       debootstrap --variant=minbase $SUITE tree (+ $INCLUDE) whose /sbin/init is
                images/demo-recipe/rootfs-init (served over NFS)
  rootfs.img    the same tree as a squashfs image (served over NBD)
  stock/initramfs-tools/, stock/dracut/
                image folders with the same kernel and root and an initrd made by Debian's
                mkinitramfs or by dracut (network-legacy, nfs, nbd), for pools with
                `initramfs: initramfs-tools` or `initramfs: dracut`
  .stamp        hash of the recipe; a rerun with an unchanged recipe does nothing

Options:
  --force       rebuild even if the stamp matches
  -h, --help    this text

Environment: BOOTPOOL_IMAGE_OUT (output dir), BOOTPOOL_MIRROR (Debian mirror, default
$MIRROR). Needs root (debootstrap, device nodes) and the Debian packages:
debootstrap kmod busybox-static nbd-client qemu-utils nfs-common squashfs-tools cpio gzip
initramfs-tools-core dracut-core dracut-network (xz-utils, zstd if modules are compressed). klibc's nfsmount is fetched with apt-get download, not installed.
EOF
}

FORCE=0
OUT="${BOOTPOOL_IMAGE_OUT:-$HERE/demo}"
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
step() { printf '[build-demo %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "build-demo: error: $*" >&2; exit 1; }
# unpack_deb PKG DIR: unpacks the Debian package PKG into DIR, fetched into $CACHE with
# apt-get download (never installed on the host) unless a copy is there already.
unpack_deb() {
    local pkg="$1" dir="$2" deb
    deb="$(ls "$CACHE"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$deb" ]; then
        step "apt-get download $pkg"
        (cd "$CACHE" && apt-get download -q "$pkg" 2>&1 | grep -v 'unsandboxed' || true)
        deb="$(ls "$CACHE"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)"
        [ -n "$deb" ] || die "apt-get download $pkg failed"
    fi
    dpkg -x "$deb" "$dir"
}

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and device nodes need it)"
for tool in apt-get apt-cache dpkg depmod debootstrap mksquashfs cpio gzip sha256sum flock \
        mkinitramfs dracut unshare; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done
[ -x /bin/busybox ] || die "missing /bin/busybox (apt-get install busybox-static)"
file_is_static() { ! ldd "$1" >/dev/null 2>&1; }
file_is_static /bin/busybox || die "/bin/busybox is not static (install busybox-static)"
[ -x /usr/sbin/nbd-client ] || die "missing /usr/sbin/nbd-client (apt-get install nbd-client)"
[ -x /usr/bin/qemu-nbd ] || die "missing /usr/bin/qemu-nbd (apt-get install qemu-utils)"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CACHE="$OUT/.cache"     # downloads and the debootstrap base tree, kept across rebuilds
WORK="$OUT/.work"       # scratch, rebuilt every time
mkdir -p "$CACHE"
# One build at a time per output dir (scripts/setup and a test may both ask for it).
exec 9> "$OUT/.lock"
if ! flock -n 9; then
    step "waiting for another build of $OUT"
    flock 9
fi

# ---- stamp: the script and every file of the recipe ---------------------------------------
recipe_hash() {
    (
        cd "$HERE"
        { echo "suite=$SUITE mirror=$MIRROR include=$INCLUDE"
          find build-demo.sh demo-recipe -type f -print0 | sort -z | xargs -0 sha256sum
        } | sha256sum | cut -d' ' -f1
    )
}
HASH="$(recipe_hash)"
if [ "$FORCE" = 0 ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$HASH" ] \
   && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ] && [ -f "$OUT/rootfs.img" ] \
   && [ -x "$OUT/rootfs/sbin/init" ] && [ -f "$OUT/stock/initramfs-tools/initrd.img" ] \
   && [ -f "$OUT/stock/dracut/initrd.img" ]; then
    step "up to date ($OUT, recipe $HASH)"
    exit 0
fi
rm -f "$OUT/.stamp"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---- 1. kernel -----------------------------------------------------------------------------
KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1)"
[ -n "$KPKG" ] || die "cannot find linux-image-amd64's kernel package (apt-get update?)"
KVER="${KPKG#linux-image-}"
step "kernel: $KPKG"
KROOT="$WORK/kernel"
unpack_deb "$KPKG" "$KROOT"
cp "$KROOT/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
MODDIR="$KROOT/lib/modules/$KVER"
# The package ships no modules.dep (its postinst runs depmod): generate it in the unpacked tree.
depmod -b "$KROOT" "$KVER" || die "depmod failed"
[ -f "$MODDIR/modules.dep" ] || die "no modules.dep for $KVER"

# ---- 2. initrd -----------------------------------------------------------------------------
step "initrd: resolving modules from modules.dep"
declare -A MODPATH=()   # module name -> path relative to $MODDIR
declare -A MODDEPS=()   # module name -> dependency names
declare -A BUILTIN=()
# modname PATH: sets $MN to the module name of PATH (kernel/x/foo-bar.ko.xz -> foo_bar)
modname() { MN="${1##*/}"; MN="${MN%%.ko*}"; MN="${MN//-/_}"; }
while IFS= read -r line; do
    path="${line%%:*}"; deps="${line#*:}"
    modname "$path"; name="$MN"
    MODPATH[$name]="$path"
    names=""
    for d in $deps; do modname "$d"; names="$names $MN"; done
    MODDEPS[$name]="$names"
done < "$MODDIR/modules.dep"
while IFS= read -r path; do modname "$path"; BUILTIN[$MN]=1; done < "$MODDIR/modules.builtin"

ORDER=()
declare -A SEEN=()
add_module() {  # depth-first: dependencies before the module itself
    local m="$1" d
    [ -n "${SEEN[$m]:-}" ] && return 0
    SEEN[$m]=1
    for d in ${MODDEPS[$m]}; do add_module "$d"; done
    ORDER+=("$m")
}
while read -r m _; do
    case "$m" in ''|'#'*) continue ;; esac
    m="${m//-/_}"
    if [ -n "${MODPATH[$m]:-}" ]; then
        add_module "$m"
    elif [ -n "${BUILTIN[$m]:-}" ]; then
        step "initrd: $m is built into the kernel"
    else
        die "module $m is neither in modules.dep nor modules.builtin"
    fi
done < "$RECIPE/modules.list"
step "initrd: ${#ORDER[@]} modules: ${ORDER[*]}"

IR="$WORK/initrd"
mkdir -p "$IR"/{bin,sbin,etc,proc,sys,dev,run,tmp,mnt,newroot,lib/modules,usr/share/udhcpc}
cp /bin/busybox "$IR/bin/busybox"
for applet in $(/bin/busybox --list); do
    [ -e "$IR/bin/$applet" ] || ln -s busybox "$IR/bin/$applet"
done
# Kernel modules, decompressed so that busybox insmod can load any of them; their load
# order goes to /etc/bootpool/modules (one file name per line, dependencies first).
mkdir -p "$IR/etc/bootpool"
: > "$IR/etc/bootpool/modules"
for m in "${ORDER[@]}"; do
    src="$MODDIR/${MODPATH[$m]}"
    case "$src" in
        *.ko.xz)  xz -dc "$src" > "$IR/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$src" > "$IR/lib/modules/$m.ko" ;;
        *.ko.gz)  gzip -dc "$src" > "$IR/lib/modules/$m.ko" ;;
        *.ko)     cp "$src" "$IR/lib/modules/$m.ko" ;;
        *) die "unknown module format: $src" ;;
    esac
    echo "$m.ko" >> "$IR/etc/bootpool/modules"
done
# copy_with_libs BIN DIR: Debian's dynamically linked BIN into the initrd's DIR, with the
# libraries ldd names at their own paths.
copy_with_libs() {
    local lib
    cp "$1" "$IR$2/"
    for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
        mkdir -p "$IR$(dirname "$lib")"
        cp -L "$lib" "$IR$lib"
    done
}
# nbd-client attaches an NBD root; qemu-nbd does when bootpool.nbd_reconnect= asks for a
# client that reconnects after a server restart.
copy_with_libs /usr/sbin/nbd-client /sbin
copy_with_libs /usr/bin/qemu-nbd /bin
[ -e "$IR/lib64" ] || die "ld-linux not copied for nbd-client"
# The NFS mount tools of the stock initramfs builders, for bootpool.nfsmount= (initrd-init):
# nfs-utils' mount.nfs (dracut's), with its libraries and libtirpc's /etc/netconfig, and
# klibc's nfsmount (Debian's initramfs-tools), with the klibc library it runs on.
[ -x /sbin/mount.nfs ] || die "missing /sbin/mount.nfs (apt-get install nfs-common)"
copy_with_libs /sbin/mount.nfs /sbin
cp /etc/netconfig /etc/protocols /etc/services "$IR/etc/"
KLIBC="$WORK/klibc"
unpack_deb klibc-utils "$KLIBC"
unpack_deb libklibc "$KLIBC"
cp "$KLIBC/usr/lib/klibc/bin/nfsmount" "$IR/sbin/nfsmount"
cp "$KLIBC"/lib/klibc-*.so "$IR/lib/" || die "no klibc library in libklibc"
install -m 0755 "$RECIPE/initrd-init" "$IR/init"
install -m 0755 "$RECIPE/udhcpc.script" "$IR/usr/share/udhcpc/default.script"
echo "$KVER" > "$IR/etc/bootpool/kernel-version"
# The kernel opens /dev/console for /init before anything is mounted.
mknod -m 600 "$IR/dev/console" c 5 1
mknod -m 666 "$IR/dev/null" c 1 3
step "initrd: packing cpio"
(cd "$IR" && find . -mindepth 1 -print0 | LC_ALL=C sort -z \
    | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -9n > "$WORK/initrd.img"

# ---- 2b. the stock builders' initrds --------------------------------------------------------
# The same kernel with an initrd made by Debian's initramfs-tools (mkinitramfs) and one made
# by dracut, each run as an admin would, so that the command lines bootpool generates for
# `initramfs: initramfs-tools` and `initramfs: dracut` meet the real scripts.
STOCK="$WORK/stock"
mkdir -p "$STOCK/initramfs-tools" "$STOCK/dracut"
step "initrd (initramfs-tools): mkinitramfs, MODULES=list"
ITCONF="$WORK/initramfs-tools-conf"
mkdir -p "$ITCONF/conf.d" "$ITCONF/hooks" "$ITCONF/scripts"
cp "$RECIPE/initramfs-tools/initramfs.conf" "$RECIPE/initramfs-tools/modules" "$ITCONF/"
# mkinitramfs takes modules from /lib/modules/VERSION only (and reads /boot/config-VERSION):
# the unpacked kernel's are bind-mounted there in a mount namespace of its own.
mkdir -p /lib/modules /boot
unshare -m sh -c 'mount --bind "$1/lib/modules" /lib/modules && mount --bind "$1/boot" /boot \
        && mkinitramfs -d "$2" -o "$3" "$4"' \
    sh "$KROOT" "$ITCONF" "$STOCK/initramfs-tools/initrd.img" "$KVER" > "$WORK/mkinitramfs.log" 2>&1 \
    || { tail -n 20 "$WORK/mkinitramfs.log" >&2; die "mkinitramfs failed"; }
# network-legacy (dhclient) and dracut's own shell init: a systemd initrd needs the whole
# default module set, several times the size.
step "initrd (dracut): network-legacy, nfs, nbd"
dracut --quiet --force --no-hostonly --no-hostonly-cmdline --kver "$KVER" \
        --kmoddir "$MODDIR" --modules "base network-legacy nfs nbd" \
        --omit "systemd systemd-networkd network-manager" \
        --add-drivers "virtio_pci virtio_net e1000 nfs nfsv3 nbd squashfs" --gzip \
        "$STOCK/dracut/initrd.img" > "$WORK/dracut.log" 2>&1 \
    || { tail -n 20 "$WORK/dracut.log" >&2; die "dracut failed"; }
chmod 0644 "$STOCK"/*/initrd.img

# ---- 3. root tree --------------------------------------------------------------------------
BASEKEY="$(echo "$SUITE $MIRROR minbase $INCLUDE" | sha256sum | cut -c1-12)"
BASE="$CACHE/debootstrap-$BASEKEY"
if [ ! -f "$BASE/.complete" ]; then
    rm -rf "$BASE"
    step "rootfs: debootstrap --variant=minbase $SUITE (a few minutes)"
    if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$BASE" "$MIRROR" \
            > "$CACHE/debootstrap.log" 2>&1; then
        tail -n 20 "$CACHE/debootstrap.log" >&2
        die "debootstrap failed (log: $CACHE/debootstrap.log)"
    fi
    # Trim what a diskless read-only root never needs.
    rm -rf "$BASE"/var/cache/apt/*.bin "$BASE"/var/cache/apt/archives/*.deb \
           "$BASE"/var/lib/apt/lists/* "$BASE"/var/log/* "$BASE"/tmp/*
    touch "$BASE/.complete"
else
    step "rootfs: reusing cached debootstrap tree"
fi
step "rootfs: copying tree and installing the demo init"
RT="$WORK/rootfs"
cp -a "$BASE" "$RT"
rm -f "$RT/.complete"
install -m 0755 "$RECIPE/rootfs-init" "$RT/usr/local/sbin/bootpool-demo-init"
# minbase has no init system: the demo init is the root's /sbin/init.
ln -sfn ../local/sbin/bootpool-demo-init "$RT/usr/sbin/init"  # relative: valid from the host too
echo bootpool-demo > "$RT/etc/hostname"
printf '# the root is read-only, an overlay on tmpfs is put on top by the initrd\n' > "$RT/etc/fstab"
echo "$HASH" > "$RT/etc/bootpool-demo-recipe"

step "rootfs.img: mksquashfs (gzip, 128 KiB blocks)"
mksquashfs "$RT" "$WORK/rootfs.img" -noappend -comp gzip -b 131072 -no-progress -quiet \
    > /dev/null

# ---- 4. publish ----------------------------------------------------------------------------
step "publishing into $OUT"
rm -rf "$OUT/rootfs" "$OUT/vmlinuz" "$OUT/initrd.img" "$OUT/rootfs.img" "$OUT/stock"
mv "$WORK/vmlinuz" "$WORK/initrd.img" "$WORK/rootfs.img" "$WORK/rootfs" "$WORK/stock" "$OUT/"
# Each stock initrd is an image folder of its own: the kernel hard-linked (bootpool serves
# boot files only from inside their folder), the root tree and image by symlink.
for b in initramfs-tools dracut; do
    ln "$OUT/vmlinuz" "$OUT/stock/$b/vmlinuz"
    ln -s ../../rootfs "$OUT/stock/$b/rootfs"
    ln -s ../../rootfs.img "$OUT/stock/$b/rootfs.img"
done
echo "$KVER" > "$OUT/kernel-version"
rm -rf "$WORK"
echo "$HASH" > "$OUT/.stamp"
mb() { du -sb "$1" | awk '{ printf "%.1f", $1 / 1048576 }'; }
step "done: vmlinuz $(mb "$OUT/vmlinuz") MiB, initrd.img $(mb "$OUT/initrd.img") MiB," \
     "rootfs/ $(mb "$OUT/rootfs") MiB, rootfs.img $(mb "$OUT/rootfs.img") MiB (kernel $KVER)"
