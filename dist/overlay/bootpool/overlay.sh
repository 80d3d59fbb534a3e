#!/bin/sh
# bootpool's addition to stock initrds (dist/overlay/ in bootpool's repository, served as
# bootpool-overlay.cpio after the image's own initrd; docs/pools.yaml.5, `overlay`).
# Sourced by /scripts/bootpool (initramfs-tools) and by dracut's pre-pivot hook, once the
# image's own scripts have mounted the read-only root. It defines one function:
#
#   bootpool_overlay ROOTMNT
#
# moves (or binds) the root mounted at ROOTMNT to /run/bootpool/ro, mounts the writable layer that
# `bootpool.overlay=` on the kernel command line names at /run/bootpool/rw, and mounts an
# overlay of the two at ROOTMNT:
#
#   bootpool.overlay=tmpfs          a tmpfs, the kernel's default size (half the memory)
#   bootpool.overlay=tmpfs:SIZE     a tmpfs of tmpfs's size= (2g, 512m, 25%)
#   bootpool.overlay=disk:DEVICE    a partition of the client's (a filesystem its kernel can
#                                   mount), its folder bootpool-overlay/ emptied first; a tmpfs
#                                   when the partition cannot be used
#   bootpool.overlay=off, or none   nothing
#
# /run moves into the new root with the initrd's other mounts, so the booted system sees both
# layers there. The image itself is never written. On failure the root stays as it was
# (read-only) and the console says why; the boot goes on. Lines start `bootpool-overlay: `.
# Written for any POSIX sh (dash, klibc's sh, busybox ash) and for the tools a stock
# initramfs-tools initrd without busybox has: klibc's (cat, mkdir, mount, umount, nuke,
# sleep, uname...), kmod's modprobe and blkid; no grep, rm or find.

# bootpool_has_fs TYPE: whether the kernel has filesystem TYPE now.
bootpool_has_fs() {
	while read -r bp_a bp_b; do
		if [ "$bp_a" = "$1" ] || [ "$bp_b" = "$1" ]; then
			return 0
		fi
	done </proc/filesystems
	return 1
}

bootpool_say() {
	echo "bootpool-overlay: $*" >/dev/console 2>/dev/null || echo "bootpool-overlay: $*"
}

# bootpool_modprobe ROOTMNT MODULE...: from the initrd, else from the root just mounted
# (its /lib/modules is the running kernel's: the same image). Both builders ship kmod's
# modprobe, which takes -d.
bootpool_modprobe() {
	bp_dir=$1
	shift
	modprobe -q -a "$@" 2>/dev/null || modprobe -q -d "$bp_dir" -a "$@" 2>/dev/null
}

# bootpool_tmpfs SIZE: a tmpfs at /run/bootpool/rw (SIZE empty: the kernel's default).
bootpool_tmpfs() {
	mount -n -t tmpfs -o "mode=0755${1:+,size=$1}" bootpool-overlay /run/bootpool/rw \
		|| return 1
	bp_upper=/run/bootpool/rw
	bp_what="tmpfs${1:+ of $1}"
}

# bootpool_disk ROOTMNT DEVICE: DEVICE's filesystem at /run/bootpool/rw, its folder
# bootpool-overlay/ emptied and used for the layer.
bootpool_disk() {
	bp_root=$1
	bp_dev=$2
	# The disk's driver may be missing from a network boot's initrd: load what the root has
	# for the devices present (PCI, virtio, then the disks they found).
	bp_i=0
	while [ ! -b "$bp_dev" ] && [ "$bp_i" -lt 20 ]; do
		for bp_bus in pci virtio scsi; do
			# shellcheck disable=SC2046
			set -- $(cat /sys/bus/$bp_bus/devices/*/modalias 2>/dev/null)
			[ $# -gt 0 ] && bootpool_modprobe "$bp_root" "$@"
		done
		[ -b "$bp_dev" ] && break
		sleep 1
		bp_i=$((bp_i + 1))
	done
	if [ ! -b "$bp_dev" ]; then
		bootpool_say "no block device $bp_dev"
		return 1
	fi
	bp_type=$(blkid -o value -s TYPE "$bp_dev" 2>/dev/null)
	if [ -z "$bp_type" ]; then
		bootpool_say "$bp_dev holds no filesystem (make one, e.g. mkfs.ext4 $bp_dev)"
		return 1
	fi
	bootpool_modprobe "$bp_root" "$bp_type" || :
	if ! mount -n -t "$bp_type" "$bp_dev" /run/bootpool/rw; then
		bootpool_say "cannot mount $bp_dev ($bp_type)"
		return 1
	fi
	# The last boot's writes go: a root is the image as served plus this boot's writes.
	if [ -e /run/bootpool/rw/bootpool-overlay ]; then
		rm -rf /run/bootpool/rw/bootpool-overlay 2>/dev/null \
			|| nuke /run/bootpool/rw/bootpool-overlay 2>/dev/null
	fi
	if ! mkdir /run/bootpool/rw/bootpool-overlay; then
		bootpool_say "cannot empty bootpool-overlay/ on $bp_dev"
		umount /run/bootpool/rw
		return 1
	fi
	bp_upper=/run/bootpool/rw/bootpool-overlay
	bp_what="$bp_dev ($bp_type)"
}

bootpool_overlay() {
	bp_root=$1
	bp_spec=
	# shellcheck disable=SC2013
	for bp_x in $(cat /proc/cmdline); do
		case "$bp_x" in
		bootpool.overlay=*) bp_spec=${bp_x#bootpool.overlay=} ;;
		esac
	done
	case "$bp_spec" in
	'' | off) return 0 ;;
	tmpfs | tmpfs:* | disk:*) ;;
	*)
		bootpool_say "FAILED: unknown bootpool.overlay=$bp_spec; the root stays read-only"
		return 1
		;;
	esac
	if ! mkdir -p /run/bootpool/ro /run/bootpool/rw; then
		bootpool_say "FAILED: cannot make /run/bootpool; the root stays read-only"
		return 1
	fi
	if ! bootpool_has_fs overlay; then
		bootpool_modprobe "$bp_root" overlay \
			|| insmod "$bp_root/lib/modules/$(uname -r)/kernel/fs/overlayfs/overlay.ko" 2>/dev/null
	fi
	if ! bootpool_has_fs overlay; then
		bootpool_say "FAILED: no overlay filesystem (module overlay in neither the initrd nor the root); the root stays read-only"
		return 1
	fi
	case "$bp_spec" in
	tmpfs) bootpool_tmpfs "" ;;
	tmpfs:*) bootpool_tmpfs "${bp_spec#tmpfs:}" ;;
	disk:*)
		if ! bootpool_disk "$bp_root" "${bp_spec#disk:}"; then
			bootpool_say "${bp_spec#disk:} not used: writes go to a tmpfs"
			bootpool_tmpfs ""
		fi
		;;
	esac || {
		bootpool_say "FAILED: cannot mount the writable layer; the root stays read-only"
		return 1
	}
	mkdir -p "$bp_upper/upper" "$bp_upper/work"
	# The root moves to /run/bootpool/ro. Under a systemd initrd (dracut's default where the
	# image has systemd) every mount is shared, and the kernel moves no mount from under a
	# shared one: there the root is bound to /run/bootpool/ro instead and the overlay mounted
	# on top of it, where systemd's sysroot.mount stays mounted. The bind is made private, or
	# the overlay mounted at the root would propagate to it and hide the image there.
	if mount -n -o move "$bp_root" /run/bootpool/ro 2>/dev/null; then
		bp_aside=move
	elif mount -n -o bind "$bp_root" /run/bootpool/ro \
		&& mount -n --make-private /run/bootpool/ro; then
		bp_aside=bind
	else
		umount /run/bootpool/ro 2>/dev/null
		bootpool_say "FAILED: cannot move or bind the root aside; it stays read-only"
		umount /run/bootpool/rw
		return 1
	fi
	if ! mount -n -t overlay -o "lowerdir=/run/bootpool/ro,upperdir=$bp_upper/upper,workdir=$bp_upper/work" \
		bootpool-overlay "$bp_root"; then
		if [ "$bp_aside" = move ]; then
			mount -n -o move /run/bootpool/ro "$bp_root"
		else
			umount /run/bootpool/ro
		fi
		umount /run/bootpool/rw
		bootpool_say "FAILED: the overlay mount failed; the root stays read-only"
		return 1
	fi
	bootpool_say "root is an overlay, writes go to $bp_what"
}
