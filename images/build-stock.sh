#!/usr/bin/env bash
# build-stock.sh: build a stock Debian image with Debian's own tools only: debootstrap,
# Debian's kernel, initramfs-tools (or, with --dracut, Debian's dracut) and systemd. No file of
# bootpool's goes into it; bootpool must see its boot from the server's side (docs/api.md,
# "How a boot ends").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUITE="${BOOTPOOL_SUITE:-bookworm}"
MIRROR="${BOOTPOOL_MIRROR:-http://deb.debian.org/debian}"
# What a network-booted systemd machine needs beyond minbase: systemd as init (and udev, or
# serial-getty@ttyS0 waits for a device unit that never appears), the kernel, the initrd
# builder, and nbd-client, whose initramfs-tools hook attaches an NBD root.
INCLUDE="systemd-sysv,udev,linux-image-amd64,initramfs-tools,nbd-client"

usage() {
    cat <<EOF
usage: $0 [--force] [--dracut] [OUT_DIR]

Builds a stock Debian $SUITE image into OUT_DIR (default: \$BOOTPOOL_STOCK_OUT, else
$HERE/stock, or $HERE/stock-dracut with --dracut), in the layout bootpool serves:

  vmlinuz       the root's own /boot/vmlinuz-VERSION (linux-image-amd64)
  initrd.img    the root's own /boot/initrd.img-VERSION, made by Debian's update-initramfs
                with MODULES=netboot (nbd-client's hook adds the NBD script)
  rootfs/       debootstrap --variant=minbase $SUITE --include=$INCLUDE
                (served over NFS, read-only)
  rootfs.img    the same tree as an ext4 image (mke2fs -d), served over NBD read-only
  .stamp        hash of this script, suite and mirror; a rerun with the same does nothing

The only changes to what debootstrap installs are Debian's own settings: MODULES=netboot in
/etc/initramfs-tools/initramfs.conf, an empty /etc/machine-id (systemd then makes one per
boot, as for any image shared by many machines) and the host name "debian". Boot it with a
pool with \`initramfs: initramfs-tools\` and \`cmdline: console=ttyS0\`: systemd starts a
getty on the serial line from the kernel's console argument.

With --dracut the initrd is Debian's dracut's instead: after debootstrap, \`apt-get install
dracut dracut-network nfs-common netbase dbus procps\` in the tree (apt removes
initramfs-tools, and dracut's kernel hook makes /boot/initrd.img-VERSION with its defaults:
not host-only, a systemd initrd with its nfs and nbd modules, which need nfs-common's and
nbd-client's programs; netbase's /etc/protocols, without which mount.nfs says "Protocol not
supported"; dbus is what systemd recommends). One dracut setting, in
/etc/dracut.conf.d/10-network-legacy.conf: its network-legacy module (dhclient, and procps's
pgrep), since dracut 059's default here, systemd-networkd, never mounts a network root. Boot
it with a pool with \`initramfs: dracut\`.

Options:
  --force       rebuild even if the stamp matches
  --dracut      the image's initrd made by dracut, not initramfs-tools
  -h, --help    this text

Environment: BOOTPOOL_STOCK_OUT (output dir), BOOTPOOL_MIRROR (Debian mirror, default
$MIRROR). Needs root and the Debian packages debootstrap and e2fsprogs.
EOF
}

FORCE=0
BUILDER=initramfs-tools
OUT="${BOOTPOOL_STOCK_OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --force) FORCE=1 ;;
        --dracut) BUILDER=dracut ;;
        -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
        *) OUT="$1" ;;
    esac
    shift
done
if [ -z "$OUT" ]; then
    OUT="$HERE/stock"
    [ "$BUILDER" = initramfs-tools ] || OUT="$HERE/stock-$BUILDER"
fi

T0=$(date +%s)
step() { printf '[build-stock %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "build-stock: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap needs it)"
for tool in debootstrap mke2fs sha256sum flock unshare chroot du; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$OUT/.work"
exec 9> "$OUT/.lock"
if ! flock -n 9; then
    step "waiting for another build of $OUT"
    flock 9
fi

HASH="$( { echo "suite=$SUITE mirror=$MIRROR include=$INCLUDE builder=$BUILDER"; sha256sum < "$HERE/build-stock.sh"; } \
        | sha256sum | cut -d' ' -f1)"
if [ "$FORCE" = 0 ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$HASH" ] \
   && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ] && [ -f "$OUT/rootfs.img" ] \
   && [ -e "$OUT/rootfs/sbin/init" ]; then
    step "up to date ($OUT, recipe $HASH)"
    exit 0
fi
rm -f "$OUT/.stamp"
rm -rf "$WORK"
mkdir -p "$WORK"
RT="$WORK/rootfs"

# in_root CMD...: runs CMD chrooted in the tree, with /proc, /sys and /dev mounted in a mount
# namespace of its own (gone with it, whatever happens).
in_root() {
    unshare -m sh -c 'r="$1"; shift
        mount -t proc proc "$r/proc" && mount -t sysfs sys "$r/sys" && mount --bind /dev "$r/dev" \
        && exec chroot "$r" "$@"' sh "$RT" "$@"
}

step "debootstrap --variant=minbase $SUITE + $INCLUDE (several minutes)"
if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$RT" "$MIRROR" \
        > "$WORK/debootstrap.log" 2>&1; then
    tail -n 20 "$WORK/debootstrap.log" >&2
    die "debootstrap failed (log: $WORK/debootstrap.log)"
fi

if [ "$BUILDER" = dracut ]; then
    step "initrd: apt-get install dracut dracut-network nfs-common netbase dbus procps"
    # dracut's network module picks systemd-networkd where the tree has it, and dracut 059's
    # systemd-networkd module never runs the netroot scripts: the root never mounts. Debian's
    # dracut-network also ships network-legacy (dhclient; its pgrep is procps's): ask for it.
    mkdir -p "$RT/etc/dracut.conf.d"
    cat > "$RT/etc/dracut.conf.d/10-network-legacy.conf" <<'CONF'
# dracut-network's network-legacy (dhclient): the network module's default here,
# systemd-networkd, never mounts a network root in dracut 059 (no netroot hook).
add_dracutmodules+=" network-legacy "
CONF
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            dracut dracut-network nfs-common netbase dbus procps > "$WORK/dracut.log" 2>&1 \
        || { tail -n 20 "$WORK/dracut.log" >&2; die "apt-get install dracut failed"; }
    [ ! -e "$RT/usr/sbin/update-initramfs" ] || [ -e "$RT/usr/bin/dracut" ] \
        || die "dracut did not replace initramfs-tools"
else
    step "initrd: update-initramfs with MODULES=netboot"
    sed -i 's/^MODULES=.*/MODULES=netboot/' "$RT/etc/initramfs-tools/initramfs.conf"
    grep -q '^MODULES=netboot$' "$RT/etc/initramfs-tools/initramfs.conf" \
        || die "no MODULES= line in initramfs.conf"
    in_root update-initramfs -u -k all > "$WORK/update-initramfs.log" 2>&1 \
        || { tail -n 20 "$WORK/update-initramfs.log" >&2; die "update-initramfs failed"; }
fi

# One root for many machines: no machine id of its own (systemd makes a transient one on a
# read-only root), no host name or resolver of the build host.
: > "$RT/etc/machine-id"
rm -f "$RT/var/lib/dbus/machine-id"
echo debian > "$RT/etc/hostname"
rm -f "$RT/etc/resolv.conf"
rm -rf "$RT"/var/cache/apt/*.bin "$RT"/var/cache/apt/archives/*.deb "$RT"/var/lib/apt/lists/* \
       "$RT"/var/log/*.log "$RT"/tmp/*

KVER="$(ls "$RT/lib/modules" | head -n1)"
[ -n "$KVER" ] && [ -f "$RT/boot/vmlinuz-$KVER" ] && [ -f "$RT/boot/initrd.img-$KVER" ] \
    || die "no kernel and initrd in $RT/boot"
if [ "$BUILDER" = dracut ]; then
    LISTING="$(in_root lsinitrd "/boot/initrd.img-$KVER")"
    for f in nfsroot nbdroot; do
        grep -q "/$f\$" <<< "$LISTING" || die "the dracut initrd has no $f (its nfs, nbd modules)"
    done
elif command -v lsinitramfs >/dev/null; then
    LISTING="$(lsinitramfs "$RT/boot/initrd.img-$KVER")"
    grep -q '^scripts/local-top/nbd$' <<< "$LISTING" \
        || die "the initrd has no nbd script (nbd-client's initramfs hook did not run)"
fi
cp "$RT/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
cp "$RT/boot/initrd.img-$KVER" "$WORK/initrd.img"
chmod 0644 "$WORK/vmlinuz" "$WORK/initrd.img"

# ext4 with room to spare (bootpool serves it read-only; with `cow:` the client may write).
TREE_MIB=$(( $(du -sm "$RT" | cut -f1) ))
SIZE_MIB=$(( TREE_MIB + TREE_MIB / 4 + 64 ))
step "rootfs.img: ext4, ${SIZE_MIB} MiB, from the ${TREE_MIB} MiB tree"
mke2fs -q -t ext4 -L debian-root -d "$RT" -F "$WORK/rootfs.img" "${SIZE_MIB}M" \
    > "$WORK/mke2fs.log" 2>&1 || { cat "$WORK/mke2fs.log" >&2; die "mke2fs failed"; }

step "publishing into $OUT"
rm -rf "$OUT/rootfs" "$OUT/vmlinuz" "$OUT/initrd.img" "$OUT/rootfs.img"
mv "$WORK/vmlinuz" "$WORK/initrd.img" "$WORK/rootfs.img" "$RT" "$OUT/"
echo "$KVER" > "$OUT/kernel-version"
rm -rf "$WORK"
echo "$HASH" > "$OUT/.stamp"
mb() { du -sb "$1" | awk '{ printf "%.1f", $1 / 1048576 }'; }
step "done: vmlinuz $(mb "$OUT/vmlinuz") MiB, initrd.img $(mb "$OUT/initrd.img") MiB," \
     "rootfs/ $(mb "$OUT/rootfs") MiB, rootfs.img $(du -sm --apparent-size "$OUT/rootfs.img" | cut -f1) MiB (kernel $KVER)"
